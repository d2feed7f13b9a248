use super::*;
use crate::{PathProblem, ScopeRule, StorageConfigId};

#[test]
fn crawl_args_default_to_no_confirmation_and_round_trip() {
    assert_eq!(CrawlArgs::from_payload(&serde_json::json!({})).unwrap(), CrawlArgs::default());
    assert_eq!(CrawlArgs::from_payload(&serde_json::Value::Null).unwrap(), CrawlArgs::default());
    let args = CrawlArgs { allow_mass_deletion: true, ..CrawlArgs::default() };
    assert_eq!(args.to_payload(), serde_json::json!({"allow_mass_deletion": true, "root_moved": false}));
    assert_eq!(CrawlArgs::from_payload(&args.to_payload()).unwrap(), args);
}

#[test]
fn a_crawl_of_folders_round_trips_and_a_whole_root_crawl_keeps_its_old_payload() {
    let closed = ClosedFile { path: "DCIM/a.jpg".into(), size: 12, mtime_ns: 1_700_000_000_123_456_789 };
    let args = CrawlArgs::of_folders(vec!["DCIM".into(), "Trips/2026".into()], vec![closed]);
    assert!(!args.is_whole_root());
    assert_eq!(CrawlArgs::from_payload(&args.to_payload()).unwrap(), args);
    // Rows written before folders existed, and whole-root crawls, carry neither field.
    assert_eq!(
        CrawlArgs::default().to_payload(),
        serde_json::json!({"allow_mass_deletion": false, "root_moved": false})
    );
    assert!(CrawlArgs::default().is_whole_root());
    let e = CrawlArgs::from_payload(&serde_json::json!({"closed": [{"path": "a.jpg", "size": 1}]})).unwrap_err();
    assert!(e.to_string().contains("closed[0]"), "names the value at fault: {e}");
}

#[test]
fn a_misspelt_or_mistyped_confirmation_is_refused_with_the_kind_named() {
    for payload in [
        serde_json::json!({"allow_mass_delete": true}),
        serde_json::json!({"allow_mass_deletion": "yes"}),
        serde_json::json!([true]),
    ] {
        let e = CrawlArgs::from_payload(&payload).unwrap_err().to_string();
        assert!(e.contains("crawl"), "{e}");
    }
    let e = CrawlArgs::from_payload(&serde_json::json!({"root_move": true})).unwrap_err().to_string();
    assert!(e.contains("root_move") && e.contains("root_moved"), "names the field and what is accepted: {e}");
}

#[test]
fn proxy_deletion_args_need_their_assets_and_take_types_optionally() {
    let id = AssetId::new();
    let args = ProxyDeletionArgs::from_payload(&serde_json::json!({"asset_ids": [id]})).unwrap();
    assert_eq!((args.asset_ids, args.proxy_types), (vec![id], None));
    let typed = ProxyDeletionArgs { asset_ids: vec![id], proxy_types: Some(vec![ProxyType::Thumbnail]) };
    assert_eq!(ProxyDeletionArgs::from_payload(&typed.to_payload()).unwrap(), typed);
    assert!(ProxyDeletionArgs::from_payload(&serde_json::json!({})).is_err(), "asset_ids are required");
    let e = ProxyDeletionArgs::from_payload(&serde_json::json!({"asset_ids": [id, "nope"]})).unwrap_err();
    assert!(e.to_string().contains("asset_ids[1]: "), "names the value at fault: {e}");
}

#[test]
fn payloads_written_by_hand_are_read_as_the_kind_s_arguments() {
    let config = Scope::Config(StorageConfigId::new());
    let item = NewWorkItem::from_json(WorkKind::Crawl, config, &serde_json::json!({"root_moved": true})).unwrap();
    assert_eq!(item.payload(), &serde_json::json!({"allow_mass_deletion": false, "root_moved": true}));
    assert!(NewWorkItem::from_json(WorkKind::Crawl, config, &serde_json::json!({"allow_mass_deletion": 1})).is_err());
    let types_only = serde_json::json!({"proxy_types": ["poster"]});
    assert!(NewWorkItem::from_json(WorkKind::ProxyDeletion, config, &types_only).is_err());
    // A kind without arguments reads any object as its defaults, and stores them.
    let purge = NewWorkItem::from_json(WorkKind::Purge, config, &serde_json::json!({"anything": 1})).unwrap();
    assert_eq!((purge.kind(), purge.payload()), (WorkKind::Purge, &serde_json::json!({})));
    let e = NewWorkItem::from_json(WorkKind::Purge, Scope::Unscoped, &serde_json::json!({})).unwrap_err();
    assert!(matches!(e, DomainError::ScopeMismatch { kind: WorkKind::Purge, .. }), "{e}");
}

#[test]
fn a_kind_without_arguments_reads_any_stored_payload_as_its_defaults() {
    // Older CLIs stored whatever JSON they were given for these kinds, and their handlers never read it: such
    // rows still run (a refusal here would fail them for good).
    for payload in [
        serde_json::json!([1]),
        serde_json::json!("x"),
        serde_json::json!(0),
        serde_json::json!({"n": 1}),
        serde_json::Value::Null,
    ] {
        assert_eq!(PurgeArgs::from_payload(&payload), Ok(PurgeArgs::default()), "{payload}");
        assert_eq!(BurstDetectionArgs::from_payload(&payload), Ok(BurstDetectionArgs::default()), "{payload}");
        assert_eq!(ProxySweepArgs::from_payload(&payload), Ok(ProxySweepArgs::default()), "{payload}");
        assert_eq!(TokenCleanupArgs::from_payload(&payload), Ok(TokenCleanupArgs::default()), "{payload}");
        assert_eq!(WorkItemRetentionArgs::from_payload(&payload), Ok(WorkItemRetentionArgs::default()), "{payload}");
    }
    // Typed by a person on the CLI: accepted as before, stored as the defaults.
    let config = Scope::Config(StorageConfigId::new());
    let purge = NewWorkItem::from_json(WorkKind::Purge, config, &serde_json::json!([1])).unwrap();
    assert_eq!(purge.payload(), &serde_json::json!({}));
}

#[test]
fn every_kind_has_arguments_that_name_it() {
    fn kind_of<A: WorkArgs>(payload: serde_json::Value) -> WorkKind {
        A::from_payload(&payload).map(|_| A::KIND).unwrap()
    }
    let kinds = [
        kind_of::<CrawlArgs>(serde_json::json!({})),
        kind_of::<BurstDetectionArgs>(serde_json::json!({})),
        kind_of::<PurgeArgs>(serde_json::json!({})),
        kind_of::<ProxyDeletionArgs>(serde_json::json!({"asset_ids": []})),
        kind_of::<ProxySweepArgs>(serde_json::json!({})),
        kind_of::<TokenCleanupArgs>(serde_json::json!({})),
        kind_of::<WorkItemRetentionArgs>(serde_json::json!({})),
    ];
    assert_eq!(kinds, WorkKind::ALL);
    for kind in WorkKind::ALL {
        let scope = match kind.scope_rule() {
            ScopeRule::Unscoped => Scope::Unscoped,
            _ => Scope::Config(StorageConfigId::new()),
        };
        let payload = serde_json::json!({"asset_ids": []});
        let payload = if kind == WorkKind::ProxyDeletion { payload } else { serde_json::json!({}) };
        assert_eq!(NewWorkItem::from_json(kind, scope, &payload).map(|i| i.kind()), Ok(kind));
    }
}

#[test]
fn into_item_checks_the_scope_of_the_kind() {
    let config = StorageConfigId::new();
    let item = CrawlArgs { root_moved: true, ..CrawlArgs::default() }.into_item(Scope::Config(config)).unwrap();
    assert_eq!((item.kind(), item.payload()["root_moved"].as_bool()), (WorkKind::Crawl, Some(true)));
    assert!(CrawlArgs::default().into_item(Scope::Unscoped).is_err());
    let sweep = NewWorkItem::from_args(&ProxySweepArgs::default(), Scope::Unscoped).unwrap();
    assert_eq!((sweep.kind(), sweep.payload()), (WorkKind::ProxySweep, &serde_json::json!({})));
}

#[test]
fn a_finished_item_s_result_is_read_as_its_kind_s_output() {
    let mut item = stored(WorkKind::Crawl);
    assert_eq!(CrawlArgs::output_of(&item), None, "no result yet");
    item.result = Some(serde_json::json!({"failed": 2, "failures": [{"path": "a.jpg", "reason": "truncated"}]}));
    let report = CrawlArgs::output_of(&item).expect("a crawl's result");
    assert_eq!((report.counts.failed, report.failures), (2, vec![PathProblem::new("a.jpg", "truncated")]));
    assert_eq!(PurgeArgs::output_of(&item), None, "another kind's result is not read as a purge's");
    item.result = Some(serde_json::json!({"failures": "not a list"}));
    assert_eq!(CrawlArgs::output_of(&item), None, "a result of another shape");
}

/// A running item of `kind`, as the store would give it.
fn stored(kind: WorkKind) -> WorkItem {
    let now = chrono::Utc::now();
    WorkItem {
        id: crate::WorkItemId::new(),
        kind,
        scope: Scope::Config(StorageConfigId::new()),
        status: crate::Status::Running,
        payload: serde_json::json!({}),
        dedup_key: None,
        requested_at: now,
        run_after: now,
        attempt: 1,
        failures: 0,
        stalls: 0,
        max_attempts: 5,
        lease_expires_at: Some(now),
        worker_id: None,
        started_at: Some(now),
        heartbeat_at: Some(now),
        finished_at: None,
        cancel_requested_at: None,
        last_error: None,
        progress: None,
        result: None,
    }
}

#[test]
fn a_crawls_folders_are_checked_sorted_in_walk_order_and_de_nested() {
    let args = |folders: &[&str]| CrawlArgs::of_folders(folders.iter().map(|f| f.to_string()).collect(), vec![]);
    let checked = args(&["a/b", "a0", "z", "a", "a b", "a/b/c", "z", "ab/c"]).checked_folders().unwrap();
    assert_eq!(checked, ["a b", "a", "a0", "ab/c", "z"], "a/b and a/b/c are inside a; z once");
    assert!(args(&["a", ""]).checked_folders().unwrap().is_empty(), "\"\" is the whole root");
    assert!(CrawlArgs::default().checked_folders().unwrap().is_empty());
    for (bad, wrong) in [
        ("../x", "`..` part"),
        ("a/../../x", "`..` part"),
        ("/abs", "is absolute"),
        ("a//b", "empty part"),
        ("a/", "empty part"),
        ("./a", "`.` part"),
        ("a\0b", "NUL"),
    ] {
        let e = args(&["ok", bad]).checked_folders().unwrap_err().to_string();
        assert!(e.contains(&format!("{bad:?}")) && e.contains(wrong) && e.contains("crawl"), "{bad}: {e}");
        let payload = serde_json::json!({"folders": [bad]});
        assert_eq!(CrawlArgs::from_payload(&payload).unwrap_err().to_string(), e, "refused when read");
        assert!(args(&[bad]).into_item(Scope::Config(StorageConfigId::new())).is_err(), "and when enqueued");
    }
    let closed = |path: &str| ClosedFile { path: path.into(), size: 1, mtime_ns: 1 };
    let e = CrawlArgs::of_folders(vec!["a".into()], vec![closed("")]).checked_folders().unwrap_err().to_string();
    assert!(e.contains("closed: \"\" is empty"), "{e}");
    let e = CrawlArgs::of_folders(vec![], vec![closed("/etc/passwd")]).checked_folders().unwrap_err().to_string();
    assert!(e.contains("\"/etc/passwd\" is absolute"), "{e}");
}

#[test]
fn a_stat_time_is_nanoseconds_since_the_epoch_saturating_far_ahead() {
    assert_eq!(ClosedFile::stat_nanos(0, 0), 0);
    assert_eq!(ClosedFile::stat_nanos(1_700_000_000, 123_456_789), 1_700_000_000_123_456_789);
    assert_eq!(ClosedFile::stat_nanos(-1, 500_000_000), -500_000_000, "before the epoch, as stat gives it");
    assert_eq!(ClosedFile::stat_nanos(i64::MAX / 1_000_000_000 + 1, 0), i64::MAX, "past 2262");
    assert_eq!(ClosedFile::stat_nanos(i64::MAX / 1_000_000_000, 999_999_999), i64::MAX);
}
