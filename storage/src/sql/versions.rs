//! Read models' versions' SQL (`shardbox_read_model_versions`, blue/green rebuilds).
//!
//! ```text
//!  load     SELECT the model's row (none: core's `ReadModelVersion::first`)
//!  save     INSERT … ON CONFLICT (model) DO UPDATE: the whole record
//!  start    a version's catch-up start: load, `start_build`, save — in the start's transaction
//!  finish   a version's catch-up stored finished: load, `finish_build`, save — in the
//!           transaction that stores it (a stage commit's, which settles its parked rows too)
//!  retire   load, `retire`, delete the kind's states, save — one write transaction
//! ```
//!
//! The rules are core's (`shardbox_core::storage::ReadModelVersion`); this only loads and
//! stores the record inside the caller's transaction.

/// Stamps the read-model version units; see [`crate::sql`].
macro_rules! version_units {
    () => {
        /// The stored record of `model`, or the first one (served by the kind of its name).
        fn load_version(
            conn: &mut Conn,
            model: &str,
        ) -> Result<shardbox_core::storage::ReadModelVersion, Failure> {
            use $crate::schema::shardbox_read_model_versions::dsl as rv;
            let row: Option<VersionRow> = rv::shardbox_read_model_versions
                .find(model)
                .select(version_columns())
                .first(conn)
                .optional()?;
            match row {
                Some(row) => version_of_row(row),
                None => Ok(shardbox_core::storage::ReadModelVersion::first(model)),
            }
        }

        /// Stores `v` whole.
        fn save_version(
            conn: &mut Conn,
            v: &shardbox_core::storage::ReadModelVersion,
        ) -> Result<(), Failure> {
            use $crate::schema::shardbox_read_model_versions::dsl as rv;
            let values = (
                rv::served_kind.eq(&v.served),
                rv::building_kind.eq(&v.building),
                rv::building_job.eq(v.building_job),
                rv::previous_kind.eq(&v.previous),
                rv::switched_at.eq(v.switched_at.map(micros)),
            );
            diesel::insert_into(rv::shardbox_read_model_versions)
                .values((rv::model.eq(&v.model), values.clone()))
                .on_conflict(rv::model)
                .do_update()
                .set(values)
                .execute(conn)?;
            Ok(())
        }

        /// Records on `model`'s record that job `job` builds `kind` (inside the start's
        /// transaction; a refusal rolls the start back).
        pub(crate) fn start_version_build(
            conn: &mut Conn,
            model: &str,
            kind: &str,
            job: i64,
        ) -> Result<(), Failure> {
            let mut v = load_version(conn, model)?;
            v.start_build(kind, job).map_err(Failure::Storage)?;
            save_version(conn, &v)
        }

        /// Applies the end of `job` (completed or cancelled) to the record of the model it
        /// builds a version of, inside the transaction that stores the job.
        pub(crate) fn finish_version_build(
            conn: &mut Conn,
            job: &CatchUpJob,
        ) -> Result<(), Failure> {
            let Some(model) = &job.spec.version_of else {
                return Ok(());
            };
            let mut v = load_version(conn, model)?;
            let at = job.finished_at.unwrap_or(job.updated_at);
            if v.finish_build(job.id, job.status == CatchUpStatus::Completed, at) {
                save_version(conn, &v)?;
            }
            Ok(())
        }

        /// `CatchUpStore::read_model_versions`.
        pub(crate) fn read_model_versions(
            conn: &mut Conn,
        ) -> Result<Vec<shardbox_core::storage::ReadModelVersion>, Failure> {
            use $crate::schema::shardbox_read_model_versions::dsl as rv;
            let rows: Vec<VersionRow> = rv::shardbox_read_model_versions
                .order(rv::model.asc())
                .select(version_columns())
                .load(conn)?;
            rows.into_iter().map(version_of_row).collect()
        }

        /// `CatchUpStore::retire_version`.
        pub(crate) fn retire_version(
            conn: &mut Conn,
            model: String,
            kind: String,
        ) -> Result<u64, Failure> {
            use $crate::schema::entity_states::dsl as es;
            <Conn as Dialect>::write_transaction(conn, |conn| {
                let mut v = load_version(conn, &model)?;
                v.retire(&kind).map_err(Failure::Storage)?;
                let deleted =
                    diesel::delete(es::entity_states.filter(es::kind.eq(&kind))).execute(conn)?;
                save_version(conn, &v)?;
                Ok(deleted as u64)
            })
        }

        /// A stored row's columns, in `version_columns` order.
        type VersionRow = (
            String,
            String,
            Option<String>,
            Option<i64>,
            Option<String>,
            Option<i64>,
        );

        fn version_columns() -> (
            $crate::schema::shardbox_read_model_versions::model,
            $crate::schema::shardbox_read_model_versions::served_kind,
            $crate::schema::shardbox_read_model_versions::building_kind,
            $crate::schema::shardbox_read_model_versions::building_job,
            $crate::schema::shardbox_read_model_versions::previous_kind,
            $crate::schema::shardbox_read_model_versions::switched_at,
        ) {
            use $crate::schema::shardbox_read_model_versions::dsl as rv;
            (
                rv::model,
                rv::served_kind,
                rv::building_kind,
                rv::building_job,
                rv::previous_kind,
                rv::switched_at,
            )
        }

        fn version_of_row(
            (model, served, building, building_job, previous, switched_at): VersionRow,
        ) -> Result<shardbox_core::storage::ReadModelVersion, Failure> {
            Ok(shardbox_core::storage::ReadModelVersion {
                model,
                served,
                building,
                building_job,
                previous,
                switched_at: rows::opt_time(switched_at)?,
            })
        }
    };
}
pub(crate) use version_units;
