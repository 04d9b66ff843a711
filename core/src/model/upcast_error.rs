//! Versions of stored shapes: the first version ([`FIRST_VERSION`], what everything stored
//! before versions existed is), what an upcaster reshapes ([`Shape`]: a payload type's
//! payloads or an entity kind's states) and why it could not ([`UpcastError`]): each error
//! names the shape and the version, and says whether trying again can succeed. The upcasting
//! itself is `entity::upcast`'s; this module is the model's, so that the stored forms
//! (`NewEvent`, `NewMessage`) and the error types can name versions without it.

use std::fmt;

/// The version of a payload or state written before versions existed (and the default of
/// [`Message::VERSION`](crate::Message::VERSION) and of the entities' `STATE_VERSION`).
pub const FIRST_VERSION: u32 = 1;

/// [`FIRST_VERSION`], for serde's defaults of the stored forms.
pub(crate) fn first_version() -> u32 {
    FIRST_VERSION
}

/// What an upcaster reshapes: the payloads of a message type, or the states of an entity
/// kind.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Shape {
    /// Payloads of this type name ([`Message::TYPE`](crate::Message::TYPE)).
    Payload(String),
    /// Framework-kept states of this entity kind.
    State(String),
}

impl Shape {
    /// The builder call that registers the missing step from `version`.
    fn registration(&self, version: u32) -> String {
        match self {
            Shape::Payload(_) => format!("`.upcast::<T>({version}, …)` on the builder"),
            Shape::State(_) => format!("`.upcast_state::<E, _>({version}, …)` on the builder"),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Payload(t) => write!(f, "payload of type `{t}`"),
            Shape::State(k) => write!(f, "state of `{k}`"),
        }
    }
}

/// Why a stored payload or state could not be brought to the shape the code reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UpcastError {
    /// It was written by newer code than this node's.
    #[error("{what} is stored at version {stored}, but this code reads version {current}: a node of newer code wrote it; it waits (retried) until a node that knows version {stored} handles it")]
    Newer {
        /// What was read.
        what: Shape,
        /// The stored version.
        stored: u32,
        /// The version this code reads.
        current: u32,
    },
    /// No upcaster is registered for a version it must pass through.
    #[error("{what} is stored at version {version}, and no upcaster turns version {version} into {next} (this code reads version {current}); register one with {}", .what.registration(*.version))]
    Missing {
        /// What was read.
        what: Shape,
        /// The version no upcaster reads.
        version: u32,
        /// The version after it.
        next: u32,
        /// The version this code reads.
        current: u32,
    },
    /// It is not JSON, so no upcaster can read it.
    #[error("{what} at version {version} is not JSON, so it cannot be upcast: {reason}")]
    NotJson {
        /// What was read.
        what: Shape,
        /// The stored version.
        version: u32,
        /// What the JSON parser said.
        reason: String,
    },
    /// An upcaster refused it.
    #[error("the upcaster of {what} version {version} failed: {reason}")]
    Failed {
        /// What was read.
        what: Shape,
        /// The version the failing upcaster reads.
        version: u32,
        /// What the upcaster said.
        reason: String,
    },
    /// A state's upcasters gave another number of states than one.
    #[error("the upcasters of {what} from version {version} gave {states} states; a state upcasts into exactly one")]
    NotOneState {
        /// The state's kind.
        what: Shape,
        /// The stored version.
        version: u32,
        /// How many states they gave.
        states: usize,
    },
}

impl UpcastError {
    /// Whether trying again later can succeed: only what newer code wrote (a node of that
    /// code may handle it); a missing or failing upcaster fails the same way every time.
    pub fn is_transient(&self) -> bool {
        matches!(self, UpcastError::Newer { .. })
    }
}
