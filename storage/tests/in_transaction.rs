//! The application's writes inside a stage commit (`StageCommit::in_transaction`, what SQL
//! projections use), on SQLite and PostgreSQL: they land with the commit, never under a lost
//! lease, and a target whose write fails is rolled back alone, its rows settled as its work
//! says, while the page's other targets commit.

use diesel::connection::SimpleConnection;
use diesel::sql_types::Text;
use diesel::{QueryableByName, RunQueryDsl};
use shardbox_conformance::fixtures::{command, delivered, messages, pick, t0, take_over};
use shardbox_core::storage::Inspect;
use shardbox_core::storage::{
    EntityKey, FailedBatch, InTransaction, RowChange, RowUpdate, StageCommit, TransactionError,
    TransactionalWork,
};
use shardbox_core::{InboxMessage, ShardIndex, Storage, StorageError};
use shardbox_storage::SqlConnection;
use std::any::Any;
use std::sync::Arc;

/// The application's table, as its own migration would make it.
const TABLE: &str = "CREATE TABLE app_notes (signal TEXT PRIMARY KEY, target TEXT NOT NULL)";

/// Inserts one `app_notes` row per message (its signal, its target); a message whose signal
/// is listed in `refuse` inserts a row that breaks the primary key.
struct Notes {
    rows: Vec<InboxMessage>,
    refuse: Vec<&'static str>,
}

impl TransactionalWork for Notes {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn apply(&self, conn: &mut dyn Any, index: usize) -> Result<(), TransactionError> {
        let m = &self.rows[index].message;
        // A refused message re-inserts the first message's signal: a primary-key violation.
        let signal = if self.refuse.contains(&m.signal_id.0.as_str()) {
            self.rows[0].message.signal_id.0.clone()
        } else {
            m.signal_id.0.clone()
        };
        let sql = format!(
            "INSERT INTO app_notes (signal, target) VALUES ('{signal}', '{}')",
            m.target_id
        );
        match SqlConnection::from_any(conn).expect("a SQL connection") {
            SqlConnection::Sqlite(c) => c.batch_execute(&sql)?,
            SqlConnection::Postgres(c) => c.batch_execute(&sql)?,
        }
        Ok(())
    }

    fn settle_failure(&self, failed: usize, error: TransactionError) -> FailedBatch {
        FailedBatch {
            updates: self.rows[failed..]
                .iter()
                .map(|m| RowUpdate {
                    seq: m.seq,
                    change: RowChange::RetryAt {
                        at: t0() + chrono::Duration::seconds(60),
                        attempts: m.attempts + 1,
                        error: error.to_string(),
                        errors: m.errors_after_failure(t0(), &error.to_string()),
                    },
                })
                .collect(),
            ..FailedBatch::default()
        }
    }
}

fn target(id: &str) -> EntityKey {
    EntityKey {
        kind: "k".into(),
        tenant: String::new(),
        id: id.into(),
    }
}

/// A commit delivering `rows`, with `work` per target.
fn commit(
    lease: &shardbox_core::Lease,
    rows: &[InboxMessage],
    work: Vec<(&str, Notes)>,
) -> StageCommit {
    let mut c = shardbox_conformance::fixtures::stage(
        lease,
        t0(),
        rows.iter().map(|m| delivered(m.seq, t0())).collect(),
    );
    c.in_transaction = work
        .into_iter()
        .map(|(id, notes)| InTransaction {
            target: target(id),
            seqs: notes.rows.iter().map(|m| m.seq).collect(),
            work: Arc::new(notes),
        })
        .collect();
    c
}

#[derive(QueryableByName, Debug, PartialEq)]
struct Note {
    #[diesel(sql_type = Text)]
    signal: String,
    #[diesel(sql_type = Text)]
    target: String,
}

/// A raw connection to the backend's database, reading the application's table.
trait Backend {
    fn notes(&mut self) -> Vec<(String, String)>;
}

struct Sqlite(diesel::SqliteConnection);
impl Backend for Sqlite {
    fn notes(&mut self) -> Vec<(String, String)> {
        notes_of(&mut self.0)
    }
}

struct Postgres(diesel::PgConnection);
impl Backend for Postgres {
    fn notes(&mut self) -> Vec<(String, String)> {
        notes_of(&mut self.0)
    }
}

fn notes_of<C>(conn: &mut C) -> Vec<(String, String)>
where
    C: diesel::Connection,
    diesel::query_builder::SqlQuery: diesel::query_dsl::LoadQuery<'static, C, Note>,
{
    let mut notes: Vec<(String, String)> =
        diesel::sql_query("SELECT signal, target FROM app_notes")
            .load::<Note>(conn)
            .expect("read app_notes")
            .into_iter()
            .map(|n| (n.signal, n.target))
            .collect();
    notes.sort();
    notes
}

async fn sqlite() -> (
    shardbox_storage::SqliteStorage,
    Box<dyn Backend>,
    tempfile::TempDir,
) {
    use diesel::Connection;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("shardbox.db");
    let storage = shardbox_storage::SqliteStorage::open(&path)
        .await
        .expect("open");
    let mut raw = diesel::SqliteConnection::establish(path.to_str().unwrap()).expect("raw");
    raw.batch_execute(&format!("PRAGMA busy_timeout = 5000; {TABLE}"))
        .expect("the application's table");
    (storage, Box::new(Sqlite(raw)), dir)
}

async fn postgres(
    test: &str,
) -> Option<(
    shardbox_storage::PostgresStorage,
    Box<dyn Backend>,
    shardbox_storage::test_schema::TestSchema,
)> {
    let url = shardbox_storage::test_schema::pg_url(test)?;
    let schema = shardbox_storage::test_schema::TestSchema::new(&url, test);
    let storage = schema.connect(2).await;
    let mut raw = schema.raw();
    raw.batch_execute(TABLE).expect("the application's table");
    Some((storage, Box::new(Postgres(raw)), schema))
}

/// Rows `a1`, `a2` (target `a`) and `b1`, `b2` (target `b`) in shard 0, picked up.
async fn page<S: Storage>(storage: &S) -> (shardbox_core::Lease, Vec<InboxMessage>) {
    storage
        .write(messages(vec![
            command(0, "a", "a1"),
            command(0, "b", "b1"),
            command(0, "a", "a2"),
            command(0, "b", "b2"),
        ]))
        .await
        .expect("write");
    let lease = pick(storage, 0, "node-a", t0()).await;
    let rows = storage
        .read_page(ShardIndex(0), t0(), 10)
        .await
        .expect("read")
        .messages;
    assert_eq!(rows.len(), 4);
    (lease, rows)
}

fn of(rows: &[InboxMessage], id: &str) -> Vec<InboxMessage> {
    rows.iter()
        .filter(|m| m.message.target_id == id)
        .cloned()
        .collect()
}

fn pair(signal: &str, target: &str) -> (String, String) {
    (signal.to_owned(), target.to_owned())
}

async fn writes_land_with_the_commit<S: Storage + Inspect>(storage: S, mut db: Box<dyn Backend>) {
    let (lease, rows) = page(&storage).await;
    let work = vec![
        (
            "a",
            Notes {
                rows: of(&rows, "a"),
                refuse: vec![],
            },
        ),
        (
            "b",
            Notes {
                rows: of(&rows, "b"),
                refuse: vec![],
            },
        ),
    ];
    storage
        .commit_stage(commit(&lease, &rows, work))
        .await
        .expect("commit");
    assert_eq!(
        db.notes(),
        vec![
            pair("a1", "a"),
            pair("a2", "a"),
            pair("b1", "b"),
            pair("b2", "b")
        ]
    );
    let left = storage.rows().await.expect("rows");
    assert!(left
        .iter()
        .all(|m| m.status == shardbox_core::MessageStatus::Delivered));
}

async fn a_stale_owner_lands_no_write<S: Storage + Inspect>(storage: S, mut db: Box<dyn Backend>) {
    let (stale, rows) = page(&storage).await;
    // Another node takes the shard over after the lease ran out.
    take_over(&storage, 0, "node-b").await;
    let work = vec![(
        "a",
        Notes {
            rows: of(&rows, "a"),
            refuse: vec![],
        },
    )];
    let refused = storage.commit_stage(commit(&stale, &rows, work)).await;
    assert!(
        matches!(refused, Err(StorageError::LeaseLost { .. })),
        "{refused:?}"
    );
    assert_eq!(db.notes(), vec![], "a stale owner's write landed");
}

async fn a_failed_write_rolls_back_its_target_alone<S: Storage + Inspect>(
    storage: S,
    mut db: Box<dyn Backend>,
) {
    let (lease, rows) = page(&storage).await;
    // b's second write breaks the primary key: b1 is written again in a new savepoint, b2's
    // row follows the work's settlement; a commits whole.
    let work = vec![
        (
            "a",
            Notes {
                rows: of(&rows, "a"),
                refuse: vec![],
            },
        ),
        (
            "b",
            Notes {
                rows: of(&rows, "b"),
                refuse: vec!["b2"],
            },
        ),
    ];
    storage
        .commit_stage(commit(&lease, &rows, work))
        .await
        .expect("commit");
    assert_eq!(
        db.notes(),
        vec![pair("a1", "a"), pair("a2", "a"), pair("b1", "b")]
    );
    let left = storage.rows().await.expect("rows");
    let b2 = left
        .iter()
        .find(|m| m.message.signal_id.0 == "b2")
        .expect("b2 kept");
    assert_eq!(b2.status, shardbox_core::MessageStatus::ToDeliver);
    assert_eq!(b2.attempts, 1);
    let error = b2.last_error.clone().unwrap_or_default().to_lowercase();
    assert!(
        error.contains("unique") || error.contains("duplicate"),
        "{error}"
    );
    for signal in ["a1", "a2", "b1"] {
        let m = left
            .iter()
            .find(|m| m.message.signal_id.0 == signal)
            .unwrap();
        assert_eq!(
            m.status,
            shardbox_core::MessageStatus::Delivered,
            "{signal}"
        );
    }
}

macro_rules! cases {
    ($($case:ident),*) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $case() {
                    let (storage, db, _dir) = super::sqlite().await;
                    super::$case(storage, db).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $case() {
                    let Some((storage, db, _schema)) =
                        super::postgres(concat!("in_transaction_", stringify!($case))).await
                    else {
                        return;
                    };
                    super::$case(storage, db).await;
                }
            )*
        }
    };
}

cases!(
    writes_land_with_the_commit,
    a_stale_owner_lands_no_write,
    a_failed_write_rolls_back_its_target_alone
);
