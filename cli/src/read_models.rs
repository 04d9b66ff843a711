//! `shardbox read-models`: the read models' versions (blue/green rebuilds) — the projection
//! kind serving each, the one being built beside it and by which catch-up job (follow it with
//! `shardbox catch-up progress ID --follow`), the one served before the last switch — as a
//! table or JSON (`shardbox_admin::views::versions`).

use crate::error::CliError;
use crate::output::{out, outln, print_json};
use crate::table::Table;
use shardbox_admin::views::versions;
use shardbox_core::CatchUpStore;

/// Lists the read models' versions.
pub async fn run<S: CatchUpStore + ?Sized>(storage: &S, json: bool) -> Result<(), CliError> {
    let list = versions::list(storage).await?;
    if json {
        return print_json(&list);
    }
    if list.is_empty() {
        outln!("no read model was built beside its served version")?;
        return Ok(());
    }
    let mut t = Table::new([
        "read model",
        "served by",
        "being built",
        "job",
        "previous",
        "switched",
    ]);
    for v in &list {
        t.row(vec![
            v.model.clone(),
            v.served.clone(),
            v.building.clone().unwrap_or_else(|| "-".into()),
            v.building_job.map_or_else(|| "-".into(), |j| j.to_string()),
            v.previous.clone().unwrap_or_else(|| "-".into()),
            v.switched_at
                .map_or_else(|| "-".into(), |at| at.to_rfc3339()),
        ]);
    }
    out!("{}", t.render())?;
    Ok(())
}
