//! A stage commit's entity states: upserted (version + number of writes) or deleted, in key
//! order.

/// Stamps these units; see [`crate::sql`].
macro_rules! commit_state_units {
    () => {
        /// Upserts (version + 1) or deletes entity states, in order.
        fn store_states(
            conn: &mut Conn,
            states: Vec<EntityStateWrite>,
            now: DateTime<Utc>,
        ) -> Result<(), Failure> {
            use $crate::schema::entity_states::dsl as es;
            let (deleted, upserts) = state_rows(&states, now);
            for key in deleted {
                diesel::delete(
                    es::entity_states
                        .filter(es::kind.eq(&key.kind))
                        .filter(es::tenant.eq(&key.tenant))
                        .filter(es::id.eq(&key.id)),
                )
                .execute(conn)?;
            }
            // A new row starts at its number of writes; an existing one moves up by it.
            <Conn as Dialect>::upsert_state_rows(conn, &upserts)
        }

        /// The keys `states` delete (before their upserts), and the rows to upsert, sorted by
        /// key: a key's number of writes after its last delete is its version step (each
        /// write a version, as if applied one by one) with its last state.
        fn state_rows(
            states: &[EntityStateWrite],
            now: DateTime<Utc>,
        ) -> (Vec<&EntityKey>, Vec<NewEntityStateRow<'_>>) {
            let now = micros(now);
            // Per key: whether the commit deletes it, how many writes follow the last delete
            // (each write is a version, as if applied one by one), and the last state. Sorted
            // by key, so that concurrent commits lock state rows in one order and one
            // statement never touches a key twice.
            let mut per_key: BTreeMap<&EntityKey, (bool, i64, Option<(&Vec<u8>, u32)>)> =
                BTreeMap::new();
            for w in states {
                let entry = per_key.entry(&w.key).or_insert((false, 0, None));
                match &w.state {
                    Some(state) => {
                        entry.1 += 1;
                        entry.2 = Some((state, w.state_version));
                    }
                    None => *entry = (true, 0, None),
                }
            }
            let mut deletes = Vec::new();
            let mut upserts = Vec::with_capacity(per_key.len());
            for (key, (deleted, writes, state)) in per_key {
                if deleted {
                    deletes.push(key);
                }
                if let Some((state, state_version)) = state {
                    upserts.push(NewEntityStateRow {
                        kind: &key.kind,
                        tenant: &key.tenant,
                        id: &key.id,
                        version: writes,
                        state,
                        updated_at: now,
                        // A version past i32::MAX is refused by `rows::version_column` for
                        // payloads; a state version that large saturates (never read back
                        // as a smaller one than the code's: it is then "newer").
                        state_version: i32::try_from(state_version).unwrap_or(i32::MAX),
                    });
                }
            }
            (deletes, upserts)
        }
    };
}
pub(crate) use commit_state_units;
