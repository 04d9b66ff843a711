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
/// count of each test's runtime; `connections` the PostgreSQL pool size. With `several = C`
/// after them, the cases run over three databases of each backend too (`several_memory::case`
/// and so on, `C` connections per database; see [`on_several_databases`]).
#[allow(unused_macros)] // each test crate uses a part of common
macro_rules! on_every_backend {
    // The same cases on every backend and over three databases of each (see
    // `on_several_databases`), the latter with `several` connections per database.
    (file = $file:literal, threads = $threads:tt, connections = $connections:tt,
     several = $several:tt; $($cases:tt)*) => {
        $crate::common::on_every_backend!(
            file = $file, threads = $threads, connections = $connections; $($cases)*);
        $crate::common::on_several_databases!(
            file = $file, threads = $threads, connections = $several; $($cases)*);
    };
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

/// Runs each async `case(storage)` once per backend on a storage over three databases
/// (`shardbox::core::databases::Databases`): `several_memory::case` (three in-memory
/// databases), `several_sqlite::case` (three fresh files) and `several_postgres::case` (three
/// fresh schemas of one server, each a whole storage with its own pool, as a database is;
/// SKIPPED loudly without `SHARDBOX_PG_URL`). Same arguments as [`on_every_backend`].
#[allow(unused_macros)] // each test crate uses a part of common
macro_rules! on_several_databases {
    (file = $file:literal, threads = $threads:tt, connections = $connections:tt;
     $($case:ident $(($arg:expr))?),* $(,)?) => {
        mod several_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    let (storage, _guard) =
                        $crate::common::several("memory", "", 3, $connections).await.unwrap();
                    super::$case(storage $(, $arg)?).await;
                }
            )*
        }
        mod several_sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    let (storage, _guard) =
                        $crate::common::several("sqlite", "", 3, $connections).await.unwrap();
                    super::$case(storage $(, $arg)?).await;
                }
            )*
        }
        mod several_postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $case() {
                    let test = concat!($file, "_several_", stringify!($case));
                    let Some((storage, _guard)) =
                        $crate::common::several("postgres", test, 3, $connections).await
                    else {
                        return;
                    };
                    super::$case(storage $(, $arg)?).await;
                }
            )*
        }
    };
}
#[allow(unused_imports)]
pub(crate) use on_several_databases;
