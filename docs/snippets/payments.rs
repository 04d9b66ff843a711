// The hidden part of the failure docs' Rust snippets (see `doc_pages` in src/lib.rs): a
// payment aggregate's types and a card gateway. The aggregate's impl is in
// payment_aggregate.rs, so that a snippet can show its own.

use serde::{Deserialize, Serialize};
use shardbox::prelude::*;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Payment {
    pub charged: i64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Charge {
    pub card: String,
    pub amount: i64,
}

impl Message for Charge {
    const TYPE: &'static str = "docs.payment.charge";
}

/// The gateway's receipt of a charge.
#[derive(Debug, Serialize, Deserialize)]
pub struct Charged(pub String);

impl Message for Charged {
    const TYPE: &'static str = "docs.payment.charged";
}

/// Why the gateway did not charge.
#[derive(Debug)]
pub enum Gateway {
    Declined,
    Unavailable,
}

/// A card gateway: declines the card "0000", is down for the card "down".
pub struct GatewayClient;

impl GatewayClient {
    pub async fn charge(&self, c: &Charge) -> Result<String, Gateway> {
        match c.card.as_str() {
            "0000" => Err(Gateway::Declined),
            "down" => Err(Gateway::Unavailable),
            card => Ok(format!("receipt-{card}-{}", c.amount)),
        }
    }
}
