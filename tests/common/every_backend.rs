//! `on_every_backend!`: one test per backend for each async case of a test file.

/// Runs each async `case(storage)` of a test file once per backend: `memory::case`,
/// `sqlite::case` (a fresh file) and `postgres::case` (a fresh schema; when
/// `SHARDBOX_PG_URL` is unset, `pg_url` says SKIPPED loudly and the test returns). `case(arg)`
/// passes one more argument after the storage.
///
/// ```text
/// common::on_every_backend!("outcomes"; handled, expired);          // 2 threads, 4 connections
/// common::on_every_backend!(file = "catch_up", threads = 4, connections = 8; rebuild(100));
/// ```
///
/// `file` names the PostgreSQL test (`file::case`) and its schema; `threads` is the worker
/// count of each test's runtime; `connections` the PostgreSQL pool size.
#[allow(unused_macros)] // each test crate uses a part of common
macro_rules! on_every_backend {
    (file = $file:literal, threads = $threads:tt, connections = $connections:tt;
     $($case:ident $(($arg:expr))?),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    super::$case($crate::common::memory() $(, $arg)?).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    let (storage, _dir) = $crate::common::sqlite().await;
                    super::$case(storage $(, $arg)?).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    let Some(url) = $crate::common::pg_url(concat!($file, "::", stringify!($case)))
                    else {
                        return;
                    };
                    let schema =
                        $crate::common::PgSchema::new(&url, concat!($file, "_", stringify!($case)));
                    let storage = std::sync::Arc::new(schema.connect($connections).await);
                    super::$case(storage $(, $arg)?).await;
                }
            )*
        }
    };
    ($file:literal; $($cases:tt)*) => {
        $crate::common::on_every_backend!(file = $file, threads = 2, connections = 4; $($cases)*);
    };
}
pub(crate) use on_every_backend;
