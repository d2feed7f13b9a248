use std::time::Duration;

use super::*;
use crate::StorageConfigId;

#[test]
fn keys_and_worker_ids_read_as_their_text() {
    let key = DedupKey::new("crawl:x").unwrap();
    assert_eq!((key.to_string(), &*key), ("crawl:x".to_owned(), "crawl:x"));
    assert_eq!(Some(key).as_deref(), Some("crawl:x"));
    let worker = WorkerId::new("nas-1").unwrap();
    assert_eq!((worker.to_string(), &*worker), ("nas-1".to_owned(), "nas-1"));
}

#[test]
fn dedup_keys_for_work_name_the_kind_and_the_config() {
    let config = StorageConfigId::from_uuid(uuid::Uuid::nil());
    assert_eq!(
        DedupKey::for_work(WorkKind::Crawl, Scope::Config(config)).as_str(),
        "crawl:00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(DedupKey::for_work(WorkKind::ProxySweep, Scope::Unscoped).as_str(), "proxy_sweep");
    assert_ne!(
        DedupKey::for_work(WorkKind::Purge, Scope::Config(config)),
        DedupKey::for_work(WorkKind::Crawl, Scope::Config(config))
    );
}

#[test]
fn kinds_round_trip_through_their_stored_names() {
    for kind in WorkKind::ALL {
        assert_eq!(kind.as_str().parse::<WorkKind>(), Ok(kind));
    }
    assert!(matches!("crawling".parse::<WorkKind>(), Err(DomainError::UnknownKind(_))));
}

#[test]
fn statuses_round_trip_and_only_three_are_finished() {
    for status in Status::ALL {
        assert_eq!(status.as_str().parse::<Status>(), Ok(status));
    }
    let finished: Vec<_> = Status::ALL.into_iter().filter(|s| s.is_finished()).collect();
    assert_eq!(finished, [Status::Succeeded, Status::Failed, Status::Cancelled]);
    assert!("done".parse::<Status>().is_err());
}

#[test]
fn config_kinds_need_a_config_and_unscoped_kinds_refuse_one() {
    let config = Scope::Config(StorageConfigId::new());
    for kind in WorkKind::ALL {
        let scoped = NewWorkItem::new(kind, config).is_ok();
        let unscoped = NewWorkItem::new(kind, Scope::Unscoped).is_ok();
        let expected = match kind.scope_rule() {
            ScopeRule::Config => (true, false),
            ScopeRule::Unscoped => (false, true),
            ScopeRule::Either => (true, true),
        };
        assert_eq!((scoped, unscoped), expected, "{kind}");
    }
    assert_eq!(WorkKind::ProxyDeletion.scope_rule(), ScopeRule::Either);
    assert_eq!(WorkKind::Purge.scope_rule(), ScopeRule::Config);
    assert_eq!(WorkKind::TokenCleanup.scope_rule(), ScopeRule::Unscoped);
}

#[test]
fn attempts_count_from_one() {
    assert!(Attempt::new(0).is_err());
    assert_eq!(Attempt::new(1).map(Attempt::get), Ok(1));
    assert_eq!(Attempt::new(7).map(|a| (a.get(), a.to_string())), Ok((7, "7".to_owned())));
}

#[test]
fn display_forms_are_the_stored_forms_and_errors_list_the_choices() {
    assert_eq!(WorkKind::BurstDetection.to_string(), "burst_detection");
    assert_eq!(Status::Cancelled.to_string(), "cancelled");
    let err = "crawling".parse::<WorkKind>().unwrap_err().to_string();
    assert!(
        err.contains("crawl, burst_detection, purge, proxy_deletion, proxy_sweep, token_cleanup, work_item_retention"),
        "{err}"
    );
}

#[test]
fn a_scope_names_its_config() {
    let c = StorageConfigId::new();
    assert_eq!(Scope::Config(c).storage_config(), Some(c));
    assert_eq!(Scope::Unscoped.storage_config(), None);
    assert_eq!(Scope::from(Some(c)), Scope::Config(c));
    assert_eq!(Scope::from(None), Scope::Unscoped);
}

#[test]
fn new_items_default_to_five_attempts() {
    let item = NewWorkItem::new(WorkKind::Crawl, Scope::Config(StorageConfigId::new())).unwrap();
    assert_eq!(item.max_attempts(), NewWorkItem::DEFAULT_MAX_ATTEMPTS);
    assert_eq!(item.max_attempts(), 5);
    assert_eq!(item.with_max_attempts(3).map(|i| i.max_attempts()), Ok(3));
}

#[test]
fn blank_or_overlong_keys_and_ids_are_refused() {
    assert!(DedupKey::new(" ").is_err());
    assert!(DedupKey::new("x".repeat(201)).is_err());
    assert_eq!(DedupKey::new("x".repeat(200)).map(|k| k.as_str().len()), Ok(200));
    assert!(WorkerId::new("").is_err());
    assert!(WorkerId::new("w".repeat(201)).is_err());
    assert_eq!(WorkerId::new("nas-1").map(|w| w.to_string()), Ok("nas-1".to_owned()));
    assert_eq!(WorkerId::new("nas-2").map(|w| w.as_str().to_owned()), Ok("nas-2".to_owned()));
}

#[test]
fn leases_are_between_a_second_and_a_day() {
    assert!(LeaseDuration::new(Duration::from_millis(999)).is_err());
    assert!(LeaseDuration::new(Duration::from_secs(86_401)).is_err());
    let lease = LeaseDuration::new(Duration::from_secs(1)).unwrap();
    assert_eq!(lease.half(), Duration::from_millis(500));
    assert_eq!(
        LeaseDuration::new(Duration::from_secs(86_400)).map(LeaseDuration::get),
        Ok(Duration::from_secs(86_400))
    );
    assert_eq!(LeaseDuration::DEFAULT.half(), Duration::from_secs(30));
}

#[test]
fn max_attempts_must_be_positive() {
    let item = NewWorkItem::new(WorkKind::TokenCleanup, Scope::Unscoped).unwrap();
    assert!(item.clone().with_max_attempts(0).is_err());
    assert_eq!(item.with_max_attempts(1).map(|i| i.max_attempts()), Ok(1));
}
