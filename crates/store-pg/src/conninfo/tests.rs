//! Reading connection strings, both forms, and hiding their passwords.

use super::*;

#[test]
fn passwords_are_masked_in_every_form_postgresql_accepts() {
    let cases = [
        ("postgres://u:secret@h:5432/db", "postgres://u:***@h:5432/db"),
        ("postgresql://u:secret@h/db", "postgresql://u:***@h/db"),
        ("postgres://u@h/db", "postgres://u@h/db"),
        ("postgres://h/db", "postgres://h/db"),
        // Unencoded `@`, `:` and `/` in the password: the user part ends at the last `@`.
        // Unreadable by the driver (it ends the user part at the first `@`): hidden whole.
        ("postgres://u:p@ss:w/rd@h/db", HIDDEN),
        ("postgres://u:p%40ss@h/db", "postgres://u:***@h/db"),
        ("postgres://u:pa?ss@h/db", "postgres://u:***@h/db"),
        ("postgres://u:pa?ss@h/db?application_name=a", "postgres://u:***@h/db?application_name=a"),
        // The driver reads what comes before an `@` as `user:password`, wherever the `@` stands: hidden.
        ("postgres://h:5432/db?application_name=x@y", "postgres://h:***@y"),
        ("postgres://h/db?application_name=x@y", "postgres://h/db?application_name=x@y"),
        ("postgres://u:se@cret@h/db?application_name=x@y", "postgres://u:***@h/db?application_name=x@y"),
        ("postgres://u:pa?ss=1&x@h/db", "postgres://u:***@h/db"),
        ("postgres://u@h/db?password=secret&sslmode=require", "postgres://u@h/db?password=***&sslmode=require"),
        // The driver does not know sslpassword: hidden whole.
        ("postgres://u@h/db?sslmode=require&sslpassword=secret", HIDDEN),
        ("postgres://u@h/db?pass%77ord=secret", "postgres://u@h/db?pass%77ord=***"),
        ("postgres://u:secret@h1:5432,h2:5433/db", "postgres://u:***@h1:5432,h2:5433/db"),
        ("postgres://u:secret@[::1]:5432/db", "postgres://u:***@[::1]:5432/db"),
        ("postgres://u:secret@%2Fvar%2Frun%2Fpostgresql/db", "postgres://u:***@%2Fvar%2Frun%2Fpostgresql/db"),
        (
            "postgres:///db?host=/var/run/postgresql&password=secret",
            "postgres:///db?host=/var/run/postgresql&password=***",
        ),
        // The driver does not read `sslrootcert` or the verifying modes; the password is still found.
        (
            "postgres://u:pa?ss@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
            "postgres://u:***@h/db?sslmode=verify-full&sslrootcert=/etc/ca.pem",
        ),
        ("host=h dbname=db user=u password=secret", "host=h dbname=db user=u password=***"),
        ("host=h password = 'se cret' user=u", "host=h password=*** user=u"),
        ("password='it\\'s' host=h", "password=*** host=h"),
        ("password=se\\ cret host=h", "password=*** host=h"),
        ("  host=/tmp   port=5432 ", "  host=/tmp   port=5432 "),
        ("host=h sslrootcert='/a b.pem' password=x", "host=h sslrootcert='/a b.pem' password=***"),
    ];
    let wrong: Vec<String> = cases
        .iter()
        .filter(|(given, shown)| mask_password(given) != *shown)
        .map(|(given, shown)| format!("{given} showed {} instead of {shown}", mask_password(given)))
        .collect();
    assert!(wrong.is_empty(), "{wrong:#?}");
    // Not readable (by us or by the driver): hidden whole.
    for unreadable in [
        "not a url",
        "host=h password='unterminated",
        "=secret",
        "Postgres://u:secret@h/db?sslmode=require",
        "postgres:/u:secret@h/db?a=b",
        "postgresql+asyncpg://u:secret@h/db?x=y",
        "Host=h;Password=secret;Database=d",
        "postgres://u:p/secret?x@h/db?sslmode=verify-full",
        "postgres://u@h/db?password=se&secret",
        "host=h passwort=secret",
    ] {
        let shown = mask_password(unreadable);
        assert!(!shown.contains("secret") && !shown.contains("unterminated"), "{shown}");
    }
}

#[test]
fn tls_settings_are_taken_out_of_both_forms_and_decoded() {
    let keys = ["sslmode", "sslrootcert"];
    let (rest, taken) =
        take_params("postgres://u@h/db?sslmode=verify-full&port=5433&sslrootcert=%2Fetc%2Fca%20x.pem", &keys).unwrap();
    assert_eq!(rest, "postgres://u@h/db?port=5433");
    assert_eq!(taken, [("sslmode".into(), "verify-full".into()), ("sslrootcert".into(), "/etc/ca x.pem".into())]);
    let (rest, _) = take_params("postgres://u@h/db?sslmode=require", &keys).unwrap();
    assert_eq!(rest, "postgres://u@h/db");
    let (rest, taken) = take_params("host=h sslrootcert = '/etc/my ca.pem' dbname=d sslmode=verify-ca", &keys).unwrap();
    assert_eq!(rest.split_whitespace().collect::<Vec<_>>(), ["host=h", "dbname=d"]);
    assert_eq!(taken[0], ("sslrootcert".into(), "/etc/my ca.pem".into()));
    assert_eq!(taken[1], ("sslmode".into(), "verify-ca".into()));
    assert!(take_params("host='open", &keys).is_none());
}

#[test]
fn every_sslmode_postgresql_names_is_read_and_others_are_refused() {
    for (given, mode) in [
        ("", SslMode::Prefer),
        ("?sslmode=disable", SslMode::Disable),
        ("?sslmode=allow", SslMode::Prefer),
        ("?sslmode=prefer", SslMode::Prefer),
        ("?sslmode=require", SslMode::Require),
        ("?sslmode=verify-full&sslrootcert=system", SslMode::VerifyFull),
        // The system's roots make verify-full the default.
        ("?sslrootcert=system", SslMode::VerifyFull),
    ] {
        let target = ConnectTarget::parse(&format!("postgres://u@h/db{given}")).unwrap();
        assert_eq!(target.ssl_mode(), mode, "{given}");
    }
    let err = ConnectTarget::parse("postgres://u:hunter2@h/db?sslmode=verify").unwrap_err().to_string();
    assert!(err.contains("sslmode") && err.contains("verify-full") && !err.contains("hunter2"), "{err}");
    let err =
        ConnectTarget::parse("host=h sslmode=verify-full sslrootcert=/nonexistent/ca.pem").unwrap_err().to_string();
    assert!(err.contains("sslrootcert") && err.contains("/nonexistent/ca.pem"), "{err}");
    assert!(ConnectTarget::parse("host=h sslcert=/x.pem").is_err(), "options we do not honour are refused");
    for weak in ["verify-ca", "require", "prefer"] {
        let err = ConnectTarget::parse(&format!("host=h sslmode={weak} sslrootcert=system")).unwrap_err().to_string();
        assert!(err.contains("sslrootcert=system needs sslmode=verify-full"), "{err}");
    }
    // Only an address: TLS has no name to negotiate for, so the modes that need TLS say so; prefer goes on.
    let err = ConnectTarget::parse("hostaddr=10.0.0.5 sslmode=require").unwrap_err().to_string();
    assert!(err.contains("host=NAME beside hostaddr"), "{err}");
    assert_eq!(ConnectTarget::parse("hostaddr=10.0.0.5").unwrap().ssl_mode(), SslMode::Prefer);
    // A socket never negotiates TLS; an address beside it still may.
    let socket = ConnectTarget::parse("host=/run/postgresql sslmode=require").unwrap();
    assert_eq!(socket.config.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
    for nameless in ["host=/run/postgresql hostaddr=10.0.0.5 sslmode=require", "dbname=d sslmode=verify-full"] {
        let err = ConnectTarget::parse(nameless).unwrap_err().to_string();
        assert!(err.contains("host=NAME beside hostaddr"), "{nameless}: {err}");
    }
}

#[test]
fn keepalives_are_set_unless_the_string_sets_its_own() {
    let target = ConnectTarget::parse("postgres://u@h/db").unwrap();
    assert_eq!(target.config.get_keepalives_idle(), Duration::from_secs(30));
    assert_eq!(target.config.get_keepalives_retries(), Some(3));
    let target = ConnectTarget::parse("host=h keepalives_idle=5").unwrap();
    assert_eq!(target.config.get_keepalives_idle(), Duration::from_secs(5));
    // A password or database that happens to hold the word is not a setting.
    let target = ConnectTarget::parse("host=h dbname=keepalives").unwrap();
    assert_eq!(target.config.get_keepalives_idle(), Duration::from_secs(30));
}

#[test]
fn a_tcp_user_timeout_is_set_unless_the_string_sets_its_own() {
    for ours in ["postgres://u@h/db", "host=h keepalives_idle=5", "host=a,b connect_timeout=5"] {
        let target = ConnectTarget::parse(ours).unwrap();
        assert_eq!(target.config.get_tcp_user_timeout(), Some(&super::tcp::TCP_USER_TIMEOUT), "{ours}");
        for host in &target.hosts {
            assert_eq!(host.get_tcp_user_timeout(), Some(&super::tcp::TCP_USER_TIMEOUT), "{ours}: each host");
        }
    }
    // Read as libpq reads it, in milliseconds (the driver alone would take 5000 for seconds).
    for theirs in ["postgres://u@h/db?tcp_user_timeout=5000", "host=h tcp_user_timeout=5000"] {
        let target = ConnectTarget::parse(theirs).unwrap();
        assert_eq!(target.config.get_tcp_user_timeout(), Some(&Duration::from_millis(5000)), "{theirs}");
    }
    // 0 leaves the system's default, as with libpq.
    let target = ConnectTarget::parse("host=h tcp_user_timeout=0").unwrap();
    assert_eq!(target.config.get_tcp_user_timeout(), None);
    let Err(StoreError::Config(message)) = ConnectTarget::parse("host=h tcp_user_timeout=soon") else {
        panic!("a timeout that is not a number is refused")
    };
    assert!(message.contains("tcp_user_timeout") && message.contains("milliseconds"), "{message}");
}

#[test]
fn several_hosts_and_target_session_attrs_reach_the_driver_in_both_forms() {
    use tokio_postgres::config::{Host, TargetSessionAttrs};
    let tcp = |h: &str| Host::Tcp(h.to_owned());
    for conn in [
        "postgres://u:secret@db1:5433,db2:5434/app?target_session_attrs=read-write&connect_timeout=2",
        "host=db1,db2 port=5433,5434 user=u password=secret dbname=app target_session_attrs=read-write connect_timeout=2",
    ] {
        let target = ConnectTarget::parse(conn).unwrap();
        assert_eq!(target.config.get_hosts(), [tcp("db1"), tcp("db2")], "{conn}");
        assert_eq!(target.config.get_ports(), [5433, 5434], "{conn}");
        assert_eq!(target.config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite, "{conn}");
        assert_eq!(target.config.get_connect_timeout(), Some(&Duration::from_secs(2)), "{conn}");
        assert_eq!(target.ssl_mode(), SslMode::Prefer, "{conn}");
        let shown = mask_password(conn);
        assert!(!shown.contains("secret") && shown.contains("db2"), "{shown}");
    }
    // Verifying modes check each host's certificate against its own name.
    let target = ConnectTarget::parse("postgres://u@db1,db2/app?sslmode=verify-full&sslrootcert=system").unwrap();
    assert_eq!(target.config.get_hosts().len(), 2);
    // Sockets only: no TLS, on every host. (The driver splits `host` on commas in this form and in a URL's
    // authority, not in a URL's query.)
    let target = ConnectTarget::parse("host=/run/a,/run/b port=5433,5434 dbname=app").unwrap();
    assert_eq!(target.config.get_ssl_mode(), tokio_postgres::config::SslMode::Disable);
    assert_eq!(target.config.get_hosts().len(), 2);
}

#[test]
fn several_hosts_with_a_connect_timeout_are_tried_one_by_one_with_everything_else_kept() {
    use tokio_postgres::config::{Host, TargetSessionAttrs};
    for conn in [
        "postgres://u:secret@db1:5433,db2/app?target_session_attrs=read-write&connect_timeout=2&application_name=w",
        "host=db1,db2 port=5433,5432 user=u password=secret dbname=app target_session_attrs=read-write \
         connect_timeout=2 application_name=w",
    ] {
        let target = ConnectTarget::parse(conn).unwrap();
        let each = target.each_host();
        assert_eq!(each.len(), 2, "{conn}");
        for ((config, limit), (host, port)) in each.into_iter().zip([("db1", 5433), ("db2", 5432)]) {
            assert_eq!(config.get_hosts(), [Host::Tcp(host.to_owned())], "{conn}");
            assert_eq!(config.get_ports(), [port], "{conn}");
            assert_eq!(limit, Some(Duration::from_secs(2)), "{conn}");
            assert_eq!(config.get_user(), Some("u"));
            assert_eq!(config.get_password(), Some(&b"secret"[..]));
            assert_eq!(config.get_dbname(), Some("app"));
            assert_eq!(config.get_application_name(), Some("w"));
            assert_eq!(config.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
            assert_eq!(config.get_keepalives_idle(), Duration::from_secs(30), "our keepalives on each host");
        }
    }
    // A socket among them never negotiates TLS; the named host keeps the mode asked for.
    let target = ConnectTarget::parse("host=db1,/run/pg port=5433,5432 connect_timeout=2 sslmode=require").unwrap();
    let modes: Vec<_> = target.each_host().iter().map(|(c, _)| c.get_ssl_mode()).collect();
    assert_eq!(modes, [tokio_postgres::config::SslMode::Require, tokio_postgres::config::SslMode::Disable]);
    // Without a connect_timeout, one host, or hosts asked for in random order: the driver tries them itself.
    for conn in [
        "postgres://u@db1,db2/app",
        "postgres://u@db1/app?connect_timeout=2",
        "postgres://u@db1,db2/app?connect_timeout=2&load_balance_hosts=random",
    ] {
        let target = ConnectTarget::parse(conn).unwrap();
        assert_eq!(target.each_host().len(), 1, "{conn}");
        assert_eq!(target.each_host()[0].1, None, "{conn}");
    }
}

/// A first host that accepts the connection and never answers (a frozen primary: the kernel still completes
/// the handshake) is passed over after `connect_timeout`, and the second host serves: the driver bounds only
/// the TCP connect, so before, every new connection waited there until the pool gave up.
#[tokio::test]
async fn a_first_host_that_never_answers_is_passed_over_after_connect_timeout() {
    use almanac_domain::{NewWorkItem, Scope, WorkKind, WorkQueue};
    let db = almanac_testdb::TestDatabase::create().await;
    // The test database's own server (its last host: the private cluster's socket), after the frozen one.
    let served: tokio_postgres::Config = db.url().parse().unwrap();
    let host = match served.get_hosts().last().unwrap() {
        tokio_postgres::config::Host::Tcp(name) => name.clone(),
        tokio_postgres::config::Host::Unix(path) => path.display().to_string(),
    };
    let port = served.get_ports().last().copied().unwrap_or(5432);
    let user = served.get_user().unwrap_or("postgres");
    let frozen = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let conn = format!(
        "host=127.0.0.1,{host} port={},{port} dbname={} user={user} sslmode=disable connect_timeout=1",
        frozen.local_addr().unwrap().port(),
        db.name()
    );
    let acquire = almanac_testdb::patience(Duration::from_secs(3));
    let store = crate::PgStore::new(&conn, 1, acquire).unwrap();
    let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
    store.enqueue(&item).await.expect("the second host takes the enqueue");
}

/// docs/operations.md ("Failover") states the user timeout a connection gets: the code's, whatever it becomes.
#[test]
fn the_operators_guide_states_the_tcp_user_timeout_the_code_sets() {
    let guide = include_str!("../../../../docs/operations.md");
    let stated = format!("gone {} s unacknowledged (`tcp_user_timeout`", super::tcp::TCP_USER_TIMEOUT.as_secs());
    assert!(guide.contains(&stated), "docs/operations.md should say {stated:?}");
}
