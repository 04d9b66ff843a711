//! Entity states' SQL: loading by key. (States are written by the stage commit, see
//! [`crate::sql::commit`].)
//!
//! Keys are grouped by (kind, tenant) so that each group is one primary-key range query with
//! an `IN` list of ids, whatever the number of keys.

/// Stamps the entity-state units; see [`crate::sql`].
macro_rules! entity_units {
    () => {
        /// `EntityStore::load_states`.
        pub(crate) fn load_states(
            conn: &mut Conn,
            keys: Vec<EntityKey>,
        ) -> Result<Vec<EntityState>, Failure> {
            use $crate::schema::entity_states::dsl as es;
            let mut groups: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
            for key in keys {
                groups
                    .entry((key.kind, key.tenant))
                    .or_default()
                    .push(key.id);
            }
            let mut states = Vec::new();
            for ((kind, tenant), mut ids) in groups {
                ids.sort_unstable();
                ids.dedup();
                for chunk in ids.chunks(IN_CHUNK) {
                    let rows: Vec<EntityStateRow> = es::entity_states
                        .filter(es::kind.eq(&kind))
                        .filter(es::tenant.eq(&tenant))
                        .filter(es::id.eq_any(chunk))
                        .select(EntityStateRow::as_select())
                        .load(conn)?;
                    for row in rows {
                        states.push(row.into_state()?);
                    }
                }
            }
            Ok(states)
        }
    };
}
pub(crate) use entity_units;
