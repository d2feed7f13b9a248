//! Loading, defaults and checks of the settings.

use super::*;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
}

#[test]
fn a_configuration_file_that_cannot_be_parsed_is_reported_without_its_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("almanac.toml");
    // `\d` is not a TOML escape: the parser quotes this very line.
    std::fs::write(&file, "[database]\nurl = \"postgres://u:hun\\dter2@h/db\"\n").unwrap();
    let err = Settings::load_from(Some(&file), env(&[])).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.starts_with("reading the configuration"), "{message}");
    assert!(!message.contains("hun") && !message.contains("dter2"), "{message}");
}

#[test]
fn a_malformed_database_url_is_a_configuration_error_naming_the_setting_and_not_the_password() {
    for bad in [
        "postgres://u:hunter2@h:notaport/db",
        "host=h password=hunter2 nonsense",
        "host=h password=hunter2 frobnicate=1",
        "postgres://u:hunter2@h/db?nosuchoption=1",
    ] {
        let err = Settings::load_from(None, env(&[("DATABASE_URL", bad)])).unwrap_err();
        let message = format!("{err:#}");
        assert!(message.starts_with("database.url: "), "{message}");
        assert!(!message.contains("hunter2"), "{message}");
    }
    for good in ["postgres://u:hunter2@h:5432/db?sslmode=disable", "host=/tmp port=5432 dbname=db user=u password=x"] {
        assert!(Settings::load_from(None, env(&[("DATABASE_URL", good)])).is_ok(), "{good}");
    }
}

#[test]
fn the_packaged_settings_file_is_accepted() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/worker.toml");
    let s = Settings::load_from(Some(&file), env(&[("DATABASE_URL", "postgres://u@h/db")])).unwrap();
    assert_eq!(s.storage.proxy_root, Path::new("/var/lib/almanac/proxies"));
}

/// An operator can tell which file was read and which of its values the environment replaced: a `DATABASE_URL` left
/// in a shell would otherwise send `config add` to another database silently.
#[test]
fn the_settings_say_which_file_they_came_from_and_what_the_environment_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("worker.toml");
    std::fs::write(&file, "[database]\nurl = \"postgres://almanac@nas/almanac\"\n[queue]\nlease = \"90s\"\n").unwrap();
    let shell = env(&[("DATABASE_URL", "postgres://dev@laptop/other"), ("ALMANAC__WORKER__SLOTS", "2"), ("HOME", "/")]);
    let s = Settings::load_from(Some(&file), shell).unwrap();
    assert_eq!(s.database.url.as_deref(), Some("postgres://dev@laptop/other"), "the environment wins, as documented");
    assert_eq!(s.origin.file.as_deref(), Some(file.as_path()));
    let set: Vec<_> = s.origin.environment.iter().map(|e| (e.variable.as_str(), e.over_the_file)).collect();
    assert_eq!(set, [("DATABASE_URL", true), ("ALMANAC__WORKER__SLOTS", false)]);
    let warnings = s.origin.overriding_the_file();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("DATABASE_URL") && warnings[0].contains(&file.display().to_string()), "{warnings:?}");
    let described = s.origin.described();
    assert_eq!(described[0], format!("settings read from {}", file.display()));
    assert_eq!(described.len(), 3, "{described:?}");
    assert_eq!(s.origin.environment_summary(), "DATABASE_URL (over the file), ALMANAC__WORKER__SLOTS");

    // DATABASE_URL wins over ALMANAC__DATABASE__URL, which then sets nothing.
    let both = env(&[("ALMANAC__DATABASE__URL", "postgres://a@h/x"), ("DATABASE_URL", "postgres://b@h/y")]);
    let s = Settings::load_from(Some(&file), both).unwrap();
    assert_eq!(s.database.url.as_deref(), Some("postgres://b@h/y"));
    assert_eq!(s.origin.environment_summary(), "DATABASE_URL (over the file)");

    let none = Settings::load_from(None, env(&[("ALMANAC__QUEUE__LEASE", "90s")])).unwrap();
    assert!(none.origin.described()[0].starts_with("no settings file"), "{:?}", none.origin.described());
    assert!(none.origin.overriding_the_file().is_empty(), "no file, nothing replaced");
    assert_eq!(Settings::load_from(None, env(&[])).unwrap().origin.environment_summary(), "none");
}

#[test]
fn defaults_match_the_spec() {
    let s = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(s.queue.lease, Duration::from_secs(60));
    assert_eq!(s.queue.heartbeat_interval, Duration::from_secs(10));
    assert_eq!(s.queue.poll_interval, Duration::from_secs(5));
    assert_eq!((s.queue.max_stalls, s.worker.slots, s.worker.max_concurrent_files), (3, 1, 4));
    assert_eq!(s.schedule.crawl_interval, Duration::from_secs(4 * 3600));
    assert_eq!(s.http.address.to_string(), "127.0.0.1:9464");
    assert_eq!(s.log.format, LogFormat::Human);
    assert_eq!((s.storage.mass_deletion_min_assets, s.storage.mass_deletion_max_percent), (10, 50));
    assert_eq!(s.storage.max_image_megapixels, 250);
    assert_eq!(s.max_image_pixels(), almanac_media::DEFAULT_MAX_PIXELS);
}

#[test]
fn the_megapixel_limit_reaches_the_crawl_in_pixels() {
    let s = Settings::load_from(None, env(&[("ALMANAC__STORAGE__MAX_IMAGE_MEGAPIXELS", "3")])).unwrap();
    assert_eq!(s.max_image_pixels(), 3_000_000);
}

#[test]
fn file_then_environment_override_defaults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("almanac.toml");
    std::fs::write(&file, "[queue]\nlease = \"20s\"\nheartbeat_interval = \"5s\"\n[worker]\nslots = 2\n").unwrap();
    let s = Settings::load_from(
        Some(&file),
        env(&[
            ("ALMANAC__QUEUE__LEASE", "8s"),
            ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "2s"),
            ("DATABASE_URL", "postgres://a:b@h/d"),
        ]),
    )
    .unwrap();
    assert_eq!(s.queue.lease, Duration::from_secs(8), "environment wins over the file");
    assert_eq!(s.worker.slots, 2, "the file wins over defaults");
    assert_eq!(s.database.url.as_deref(), Some("postgres://a:b@h/d"));
}

#[test]
fn short_leases_are_accepted_for_tests_and_operators() {
    let s = Settings::load_from(
        None,
        env(&[("ALMANAC__QUEUE__LEASE", "2s"), ("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "500ms")]),
    );
    assert_eq!(s.unwrap().queue.lease, Duration::from_secs(2));
}

#[test]
fn bad_values_and_unknown_keys_name_the_key() {
    let err = |pairs: &[(&str, &str)]| Settings::load_from(None, env(pairs)).unwrap_err().to_string();
    assert!(err(&[("ALMANAC__QUEUE__LEASE", "soon")]).contains("lease"));
    assert!(err(&[("ALMANAC__QUEUE__HEARTBEAT_INTERVAL", "20s")]).contains("queue.heartbeat_interval"));
    assert!(err(&[("ALMANAC__QUEUE__LEESE", "20s")]).contains("leese"));
    assert!(err(&[("ALMANAC__WORKER__SLOTS", "0")]).contains("worker.slots"));
    assert!(err(&[("ALMANAC__STORAGE__PROXY_ROOT", "relative/dir")]).contains("storage.proxy_root"));
    assert!(err(&[("ALMANAC__STORAGE__PROXY_ROOT", "/")]).contains("storage.proxy_root"));
    assert!(err(&[("ALMANAC__STORAGE__PROXY_ROOT", "/volume1/new/../photos")]).contains("`..`"));
    assert!(err(&[("ALMANAC__STORAGE__MASS_DELETION_MAX_PERCENT", "0")]).contains("mass_deletion_max_percent"));
    assert!(err(&[("ALMANAC__STORAGE__MASS_DELETION_MAX_PERCENT", "300")]).contains("mass_deletion_max_percent"));
    assert!(err(&[("ALMANAC__STORAGE__MAX_IMAGE_MEGAPIXELS", "0")]).contains("max_image_megapixels"));
    assert!(err(&[("ALMANAC__STORAGE__MAX_IMAGE_MEGAPIXELS", "10001")]).contains("max_image_megapixels"));
    assert!(err(&[("ALMANAC__LOG__FORMAT", "xml")]).contains("format"));
}

#[test]
fn allowed_hosts_are_host_names() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("almanac.toml");
    let load = |hosts: &str| {
        std::fs::write(&file, format!("[http]\nallowed_hosts = {hosts}\n")).unwrap();
        Settings::load_from(Some(&file), env(&[]))
    };
    let s = load(r#"["almanac.example", "prometheus-target:9464", "[::1]:9464"]"#).unwrap();
    assert_eq!(s.http.allowed_hosts, ["almanac.example", "prometheus-target:9464", "[::1]:9464"]);
    for bad in ["https://almanac.example", "almanac.example/", "almanac.example:https", ""] {
        let message = load(&format!("[{bad:?}]")).unwrap_err().to_string();
        assert!(message.starts_with("http.allowed_hosts: ") && message.contains(&format!("{bad:?}")), "{message}");
    }
}

#[test]
fn the_effective_configuration_hides_the_password() {
    let s = Settings {
        database: Database { url: Some("postgres://u:pw@h/d".into()), ..Database::default() },
        ..Settings::default()
    };
    let shown = s.masked_toml();
    assert!(shown.contains("***") && !shown.contains("pw@"), "{shown}");
}

/// The guide's settings table states each setting's default; the defaults' one home is the code (the crates
/// that own them), so the table is checked against what the Worker ships, row by row.
#[test]
fn the_guide_states_the_shipped_defaults() {
    use humantime_serde::re::humantime::parse_duration;
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/operations.md")).unwrap();
    let shipped = serde_json::to_value(Settings::default()).unwrap();
    let rows = guide.lines().skip_while(|l| !l.starts_with("| key | default | meaning |")).skip(2);
    let mut checked = Vec::new();
    for row in rows.take_while(|l| l.starts_with('|')) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let keys: Vec<&str> = cells[1].split(',').map(|k| k.trim().trim_matches('`')).collect();
        let values: Vec<&str> =
            if keys.len() == 1 { vec![cells[2]] } else { cells[2].split(',').map(str::trim).collect() };
        assert_eq!(keys.len(), values.len(), "one default per key in: {row}");
        for (key, stated) in keys.iter().zip(values) {
            let (section, name) = key.split_once('.').unwrap_or_else(|| panic!("not a section.key: {key}"));
            let value = shipped
                .get(section)
                .and_then(|s| s.get(name))
                .unwrap_or_else(|| panic!("the guide lists `{key}`, which is not a setting"));
            let stated = stated.trim_matches('`');
            let same = match value {
                // Computed at start-up when not set (the worker's id): the guide says how.
                serde_json::Value::Null if stated.starts_with('<') => true,
                serde_json::Value::Null => stated == "—",
                serde_json::Value::String(s) => match (parse_duration(s), parse_duration(&stated.replace(' ', ""))) {
                    (Ok(a), Ok(b)) => a == b,
                    _ => s == stated,
                },
                serde_json::Value::Array(a) => a.is_empty() && stated == "[]",
                // A number or a flag: as JSON writes it (`Value == &str` would compare only strings).
                other => {
                    let shown = other.to_string();
                    shown == stated
                }
            };
            assert!(same, "docs/operations.md says `{key}` defaults to {stated}; the Worker ships {value}");
            checked.push(*key);
        }
    }
    for key in ["queue.lease", "schedule.purge_after", "worker.slots", "http.address", "database.url"] {
        assert!(checked.contains(&key), "the settings table was not read whole: no row for `{key}`");
    }
}

#[test]
fn the_pooler_mode_is_session_unless_set_and_a_mode_nobody_knows_is_refused_naming_the_choices() {
    let s = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(s.pooler_mode(), almanac_store_pg::PoolerMode::Session);
    let s = Settings::load_from(None, env(&[("ALMANAC__DATABASE__POOLER_MODE", "transaction")])).unwrap();
    assert_eq!(s.pooler_mode(), almanac_store_pg::PoolerMode::Transaction);
    let err = Settings::load_from(None, env(&[("ALMANAC__DATABASE__POOLER_MODE", "statement")])).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.starts_with("database.pooler_mode: \"statement\""), "{message}");
    assert!(message.contains("session, transaction"), "{message}");
}

#[test]
fn the_listen_url_is_checked_and_its_password_never_shown() {
    let listen = "postgres://u:hunter2@db-direct:5432/almanac";
    let s = Settings::load_from(None, env(&[("ALMANAC__DATABASE__LISTEN_URL", listen)])).unwrap();
    assert_eq!(s.database.listen_url.as_deref(), Some(listen));
    let shown = s.masked_toml();
    assert!(shown.contains("listen_url = \"postgres://u:***@db-direct:5432/almanac\""), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
    let err = Settings::load_from(None, env(&[("ALMANAC__DATABASE__LISTEN_URL", "postgres://u:hunter2@h:x/db")]))
        .unwrap_err();
    let message = format!("{err:#}");
    assert!(message.starts_with("database.listen_url: ") && !message.contains("hunter2"), "{message}");
    // A file that cannot be parsed on its listen_url line does not show it either.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("almanac.toml");
    std::fs::write(&file, "[database]\nlisten_url = \"postgres://u:hun\\dter2@h/db\"\n").unwrap();
    let message = format!("{:#}", Settings::load_from(Some(&file), env(&[])).unwrap_err());
    assert!(!message.contains("hun") && !message.contains("dter2"), "{message}");
}

#[test]
fn quiet_hours_are_read_into_the_schedule_and_a_bad_window_names_the_setting() {
    let s = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(s.schedule_settings().unwrap().quiet_hours, None);
    let s = Settings::load_from(None, env(&[("ALMANAC__SCHEDULE__QUIET_HOURS", "")])).unwrap();
    assert_eq!(s.schedule_settings().unwrap().quiet_hours, None, "empty is none");
    let s = Settings::load_from(None, env(&[("ALMANAC__SCHEDULE__QUIET_HOURS", "22:00-06:30 UTC")])).unwrap();
    let expected = almanac_handlers::QuietHours::parse("22:00-06:30 UTC").unwrap();
    assert!(expected.is_some());
    assert_eq!(s.schedule_settings().unwrap().quiet_hours, expected);
    for bad in ["22-6", "01:00-01:00", "01:00-06:00 CET"] {
        let err = Settings::load_from(None, env(&[("ALMANAC__SCHEDULE__QUIET_HOURS", bad)])).unwrap_err();
        let message = format!("{err:#}");
        assert!(message.starts_with("schedule.quiet_hours: "), "{message}");
        assert!(message.contains("01:00-06:30"), "says how to write one: {message}");
    }
}

#[test]
fn the_priority_is_low_unless_set_and_bad_values_name_the_setting() {
    let s = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(s.priority().unwrap(), almanac_media::Priority::default());
    let s =
        Settings::load_from(None, env(&[("ALMANAC__WORKER__NICE", "19"), ("ALMANAC__WORKER__IO_PRIORITY", "idle")]))
            .unwrap();
    assert_eq!(s.priority().unwrap(), almanac_media::Priority { nice: 19, io: almanac_media::IoPriority::Idle });
    let err = Settings::load_from(None, env(&[("ALMANAC__WORKER__NICE", "20")])).unwrap_err();
    assert!(format!("{err:#}").starts_with("worker.nice: 20 must be from 0"), "{err:#}");
    let err = Settings::load_from(None, env(&[("ALMANAC__WORKER__IO_PRIORITY", "lowest")])).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.starts_with("worker.io_priority: \"lowest\" is not one of normal, low, idle"), "{message}");
}

#[test]
fn the_watched_crawl_interval_reaches_the_scheduler_and_is_a_minute_or_more() {
    let s = Settings::load_from(None, env(&[])).unwrap();
    assert_eq!(s.schedule_settings().unwrap().watched_crawl_interval, Duration::from_secs(86_400));
    let s = Settings::load_from(None, env(&[("ALMANAC__SCHEDULE__WATCHED_CRAWL_INTERVAL", "7days")])).unwrap();
    assert_eq!(s.schedule_settings().unwrap().watched_crawl_interval, Duration::from_secs(7 * 86_400));
    let err = Settings::load_from(None, env(&[("ALMANAC__SCHEDULE__WATCHED_CRAWL_INTERVAL", "30s")])).unwrap_err();
    assert!(err.to_string().contains("schedule.watched_crawl_interval: 30s must be at least one minute"), "{err}");
}

#[test]
fn a_limit_is_accepted_at_its_bound_and_refused_past_it() {
    let load = |key: &str, value: &str| Settings::load_from(None, env(&[(key, value)]));
    for (key, at_bound, past, named) in [
        ("ALMANAC__STORAGE__SETTLE_TIME", "1h", "3601s", "storage.settle_time"),
        ("ALMANAC__STORAGE__TRANSCODE_LIMIT", "24h", "86401s", "storage.transcode_limit"),
        ("ALMANAC__STORAGE__TRANSCODE_LIMIT", "1min", "59s", "storage.transcode_limit"),
        ("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "1h", "3601s", "storage.root_answer_limit"),
        ("ALMANAC__STORAGE__ROOT_ANSWER_LIMIT", "1s", "999ms", "storage.root_answer_limit"),
        ("ALMANAC__SCHEDULE__CRAWL_INTERVAL", "60s", "59s", "schedule.crawl_interval"),
        ("ALMANAC__WATCH__POLL_INTERVAL", "1s", "999ms", "watch.poll_interval"),
        ("ALMANAC__WATCH__LEASE", "3s", "2999ms", "watch.lease"),
        ("ALMANAC__SCHEDULE__PURGE_AFTER", "36525days", "36526days", "schedule.purge_after"),
        ("ALMANAC__QUEUE__RETRY_CAP", "30days", "31days", "queue.retry"),
    ] {
        assert!(load(key, at_bound).is_ok(), "{key}={at_bound}: {:?}", load(key, at_bound).err());
        let err = load(key, past).unwrap_err().to_string();
        assert!(err.starts_with(named), "{key}={past}: {err}");
    }
    // The debounce is bounded by the max delay, which is bounded by an hour: both set, not read from the defaults.
    let watch = |debounce: &str, max_delay: &str| {
        let pairs = [("ALMANAC__WATCH__DEBOUNCE", debounce), ("ALMANAC__WATCH__MAX_DELAY", max_delay)];
        Settings::load_from(None, env(&pairs))
    };
    assert!(watch("2s", "2s").is_ok());
    assert!(watch("2001ms", "2s").unwrap_err().to_string().starts_with("watch.debounce"));
    assert!(watch("1s", "1h").is_ok());
    assert!(watch("1s", "3601s").unwrap_err().to_string().starts_with("watch.max_delay"));
}

#[test]
fn secrets_are_hidden_from_a_message_and_other_values_are_not() {
    let file = "[http]\ntoken = \"tok-secret-1\"\n[database]\nurl = \"postgres://u:pw-2@h/db\"\n\
                admin_password = 'pw-3'\n[worker]\nslots = \"x9\"\n";
    let shown = hide_secrets("bad values: tok-secret-1, postgres://u:pw-2@h/db, pw-3, x9", file);
    for secret in ["tok-secret-1", "pw-2", "pw-3"] {
        assert!(!shown.contains(secret), "{shown}");
    }
    assert!(shown.contains("x9"), "{shown}");
}

/// The transcode's limit as set reaches the tools' limits the crawl and the debris clean-up are given, and the
/// proxy sweep's age floor follows it (it must exceed the longest proxy write); the probe's limit stays shipped.
#[test]
fn the_transcode_limit_set_is_the_crawls_and_the_sweeps_floor_follows_it() {
    let s = Settings::load_from(None, env(&[("ALMANAC__STORAGE__TRANSCODE_LIMIT", "3h")])).unwrap();
    let limits = s.tool_limits();
    assert_eq!(limits.transcode, Duration::from_secs(3 * 3600));
    assert_eq!(limits.quick, almanac_media::ToolLimits::default().quick);
    let floor = almanac_handlers::maintenance::ProxySweepHandler::<almanac_store_pg::PgStore>::min_age_for(limits);
    assert!(floor > limits.longest_proxy_write(), "{floor:?}");
    assert_eq!(Settings::default().tool_limits(), almanac_media::ToolLimits::default(), "shipped: the media crate's");
}

/// A file saved by an editor on Windows (Notepad's byte order mark, CRLF line ends), as an operator copying the
/// packaged file through a share may save it, reads as the same file saved on Linux.
#[test]
fn a_file_saved_with_a_byte_order_mark_and_crlf_reads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("almanac.toml");
    std::fs::write(&file, "\u{feff}[queue]\r\nlease = \"2m\"\r\n[worker]\r\nslots = 3\r\n").unwrap();
    let s = Settings::load_from(Some(&file), env(&[("DATABASE_URL", "postgres://a:b@h/d")])).unwrap();
    assert_eq!((s.queue.lease, s.worker.slots), (Duration::from_secs(120), 3));
}

/// A list setting given in the environment (a Docker deployment configured by environment alone) is read as its
/// comma-separated items; in the file it stays a TOML list.
#[test]
fn a_list_setting_is_read_from_the_environment_as_comma_separated_items() {
    let s = Settings::load_from(
        None,
        env(&[
            ("ALMANAC__HTTP__ALLOWED_HOSTS", "almanac.example, nas.local:9464"),
            ("DATABASE_URL", "postgres://a@h/d"),
        ]),
    )
    .unwrap();
    assert_eq!(s.http.allowed_hosts, ["almanac.example", "nas.local:9464"]);
    let one = Settings::load_from(None, env(&[("ALMANAC__HTTP__ALLOWED_HOSTS", "almanac.example")])).unwrap();
    assert_eq!(one.http.allowed_hosts, ["almanac.example"]);
    let none = Settings::load_from(None, env(&[("ALMANAC__HTTP__ALLOWED_HOSTS", "")])).unwrap();
    assert!(none.http.allowed_hosts.is_empty());
}

/// Without `--config-file`, a command reads `almanac.toml` in the current folder, else the installed file: the
/// first of the two that is there.
#[test]
fn the_settings_file_is_the_local_one_else_the_installed_one() {
    let dir = tempfile::tempdir().unwrap();
    let (local, installed) = (dir.path().join("almanac.toml"), dir.path().join("worker.toml"));
    assert_eq!(first_file(&[&local, &installed]), None);
    std::fs::write(&installed, "").unwrap();
    assert_eq!(first_file(&[&local, &installed]), Some(installed.clone()));
    std::fs::write(&local, "").unwrap();
    assert_eq!(first_file(&[&local, &installed]), Some(local));
    std::fs::create_dir(dir.path().join("folder.toml")).unwrap();
    assert_eq!(first_file(&[&dir.path().join("folder.toml"), &installed]), Some(installed), "a folder is no file");
}
