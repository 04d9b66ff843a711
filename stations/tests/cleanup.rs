//! The `Cleanup` station: it claims no row of the page and asks for a purge of one page of
//! delivered rows only when the page read saw some past their window.

mod common;

use common::*;
use shardbox_core::storage::Page;
use shardbox_core::Station;
use shardbox_stations::Cleanup;

#[tokio::test]
async fn cleanup_asks_to_purge_one_page_of_delivered_rows_when_the_read_saw_one() {
    let fx = Fixture::new(config().page_size(17).build().unwrap()).await;
    let mut c = fx.conveyor_with(Page {
        messages: vec![add(1, "a", 10)],
        purge_due: true,
        ..Page::default()
    });
    Cleanup::new().process(&mut c).await.unwrap();

    assert_eq!(c.intent(0), None, "cleanup claims no row of the page");
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.purge_delivered, 17);
    assert_eq!(Cleanup::new().name(), "cleanup");

    // Nothing past its window when the page was read: no purge.
    let mut c = fx.conveyor(vec![add(1, "a", 10)]);
    Cleanup::new().process(&mut c).await.unwrap();
    let (commit, _) = c.into_commit(t0() + secs(30));
    assert_eq!(commit.purge_delivered, 0);
}
