// The payment aggregate of the failure docs' snippets (its types in payments.rs).

impl Aggregate for Payment {
    const KIND: &'static str = "payment";
    type Command = Charge;
    type Event = Charged;

    async fn handle(&self, c: &Charge, _: &Context<'_>) -> Result<Vec<Charged>, HandlerError> {
        match GatewayClient.charge(c).await {
            Ok(receipt) => Ok(vec![Charged(receipt)]),
            Err(Gateway::Declined) => Err(HandlerError::permanent("card declined")),
            Err(Gateway::Unavailable) => Err(HandlerError::new("gateway unavailable")),
        }
    }

    fn apply(&mut self, _: &Charged) {
        self.charged += 1;
    }
}
