//! Entity states' SQL: loading by key. (States are written by the stage commit, see
//! [`crate::sql::commit`].)
//!
//! Keys are grouped by (kind, tenant) so that each group is one query over the primary key
//! (`Dialect::load_state_rows`) with the list of ids, whatever the number of keys.

/// Stamps the entity-state units; see [`crate::sql`].
macro_rules! entity_units {
    () => {
        /// `EntityStore::load_states`.
        pub(crate) fn load_states(
            conn: &mut Conn,
            keys: Vec<EntityKey>,
        ) -> Result<Vec<EntityState>, Failure> {
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
                    for row in <Conn as Dialect>::load_state_rows(conn, &kind, &tenant, chunk)? {
                        states.push(row.into_state()?);
                    }
                }
            }
            Ok(states)
        }
    };
}
pub(crate) use entity_units;
