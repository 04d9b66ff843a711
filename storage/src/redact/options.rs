//! libpq's connection option names (as of libpq 18, the version `pq-sys` bundles), and which
//! of them hold secrets. Both readers ask here: the URL reader to tell where a password in the
//! query ends, both to tell which values to hide. Names are matched with case ignored: libpq
//! itself is strict, but `PASSWORD=` was surely meant as a password too.

/// Options whose values are secrets: those libpq shows as password fields (`password`,
/// `sslpassword`, `oauth_client_secret`) and the SCRAM keys, which authenticate as well as a
/// password does.
const SECRET: &[&str] = &[
    "password",
    "sslpassword",
    "oauth_client_secret",
    "scram_client_key",
    "scram_server_key",
];

/// Every option libpq knows, `fe-connect.c`'s `PQconninfoOptions`.
const KNOWN: &[&str] = &[
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "passfile",
    "require_auth",
    "channel_binding",
    "connect_timeout",
    "client_encoding",
    "options",
    "application_name",
    "fallback_application_name",
    "keepalives",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_count",
    "tcp_user_timeout",
    "replication",
    "gssencmode",
    "sslmode",
    "sslnegotiation",
    "sslcompression",
    "sslcert",
    "sslkey",
    "sslkeylogfile",
    "sslpassword",
    "sslcertmode",
    "sslrootcert",
    "sslcrl",
    "sslcrldir",
    "sslsni",
    "requirepeer",
    "ssl_min_protocol_version",
    "ssl_max_protocol_version",
    "min_protocol_version",
    "max_protocol_version",
    "krbsrvname",
    "gsslib",
    "gssdelegation",
    "service",
    "target_session_attrs",
    "load_balance_hosts",
    "scram_client_key",
    "scram_server_key",
    "oauth_issuer",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_scope",
];

/// Whether the option `name` holds a secret.
pub(super) fn is_secret(name: &str) -> bool {
    SECRET.iter().any(|s| s.eq_ignore_ascii_case(name))
}

/// Whether libpq knows an option `name`.
pub(super) fn is_known(name: &str) -> bool {
    KNOWN.iter().any(|k| k.eq_ignore_ascii_case(name))
}
