use super::*;

#[test]
fn with_database_replaces_only_the_database() {
    assert_eq!(
        with_database("postgres://postgres@localhost/postgres?host=/tmp/s&port=5432", "t1"),
        "postgres://postgres@localhost/t1?host=/tmp/s&port=5432"
    );
    assert_eq!(with_database("postgres://u:p@db:5432/app", "t2"), "postgres://u:p@db:5432/t2");
    assert_eq!(with_database("postgres://u@db", "t3"), "postgres://u@db/t3");
}

#[test]
fn a_template_is_named_after_the_migrations_the_binary_carries_and_refused_to_one_built_before_them() {
    let dir = tempfile::tempdir().unwrap();
    let built = almanac_store_pg::migration_names();
    for name in &built {
        fs::create_dir(dir.path().join(name)).unwrap();
        fs::copy(crate::migrations_dir().join(name).join("up.sql"), dir.path().join(name).join("up.sql")).unwrap();
    }
    let same = migrations_fingerprint(dir.path(), &built).unwrap();
    assert_eq!(same, migrations_fingerprint(&crate::migrations_dir(), &built).unwrap());
    // A migration edited since this binary was built: the template keeps the name of what the binary migrates.
    let last = built.last().unwrap();
    fs::write(dir.path().join(last).join("up.sql"), "SELECT 'edited since';").unwrap();
    assert_eq!(migrations_fingerprint(dir.path(), &built).unwrap(), same);
    assert_eq!(same, almanac_store_pg::migrations_digest());
    fs::create_dir(dir.path().join("2999-01-01-000001_newer")).unwrap();
    fs::write(dir.path().join("2999-01-01-000001_newer/up.sql"), "SELECT 1;").unwrap();
    let refused = migrations_fingerprint(dir.path(), &built).unwrap_err().to_string();
    assert!(refused.contains("2999-01-01-000001_newer") && refused.contains("build it again"), "{refused}");
}

/// The ids the server and PgBouncer run as, when we are root, are those of the `postgres` OS user and group
/// (its line of `/etc/passwd`: name, password, uid, gid).
#[test]
fn the_postgres_ids_are_those_of_the_postgres_user() {
    let passwd = fs::read_to_string("/etc/passwd").unwrap();
    let Some(line) = passwd.lines().find(|l| l.starts_with("postgres:")) else {
        return; // No such user here: the server runs as whoever runs the tests.
    };
    let fields: Vec<&str> = line.split(':').collect();
    assert_eq!(postgres_uid().unwrap().to_string(), fields[2]);
    assert_eq!(postgres_gid().unwrap().to_string(), fields[3]);
}

/// A child spawned with the hook keeps no descriptor of ours beyond the standard three, even one not marked
/// close-on-exec (as a `flock` around `cargo test` hands down); without the hook it keeps it.
#[test]
fn a_child_keeps_none_of_our_descriptors() {
    use std::os::fd::AsRawFd;
    let file = tempfile::tempfile().unwrap();
    let fd = file.as_raw_fd();
    // SAFETY: clears close-on-exec on a descriptor this test owns, as an inherited one would be.
    #[allow(unsafe_code)]
    let cleared = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    assert_eq!(cleared, 0);
    let open_in_child = |hook: bool| {
        let mut command = Command::new("sh");
        command.args(["-c", &format!("test -e /proc/self/fd/{fd} && echo open || echo closed")]);
        if hook {
            inherit_no_descriptors(&mut command);
        }
        String::from_utf8(command.output().unwrap().stdout).unwrap().trim().to_owned()
    };
    assert_eq!(open_in_child(false), "open", "the descriptor is inheritable");
    assert_eq!(open_in_child(true), "closed", "the hook let the child keep it");
}
