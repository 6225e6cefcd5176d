//! Tests of option → request conversion and of the retry policy arithmetic.

use super::*;

#[test]
fn create_options_fill_every_field() {
    let fence = Fence {
        key: "k".into(),
        token: 9,
    };
    let options = CreateOptions {
        mode: CreateMode::PersistentSequentialWithTtl,
        session_id: 5,
        ttl_ms: 1234,
        request_id: 77,
        fence: Some(fence.clone()),
        create_parents: true,
    };
    let req = create_request("/a/b-", b"data".to_vec(), &options);
    assert_eq!(req.path, "/a/b-");
    assert_eq!(&req.data[..], b"data");
    assert_eq!(req.mode, CreateMode::PersistentSequentialWithTtl as i32);
    assert_eq!(req.session_id, 5);
    assert_eq!(req.ttl_ms, 1234);
    assert_eq!(req.request_id, 77);
    assert_eq!(req.fence, Some(fence.into()));
}

#[test]
fn create_defaults_are_persistent_and_anonymous() {
    let req = create_request("/a", Vec::new(), &CreateOptions::default());
    assert_eq!(req.mode, CreateMode::Persistent as i32);
    assert_eq!((req.session_id, req.ttl_ms, req.request_id), (0, 0, 0));
    assert_eq!(req.fence, None);
    let eph = CreateOptions::ephemeral(3, true);
    assert_eq!(eph.mode, CreateMode::EphemeralSequential);
    assert_eq!(eph.session_id, 3);
    assert_eq!(
        CreateOptions::ephemeral(3, false).mode,
        CreateMode::Ephemeral
    );
}

#[test]
fn read_options_reach_get_exists_and_children() {
    let read = ReadOptions::at_least(42);
    let get = get_request("/x", read);
    assert_eq!(
        (get.path.as_str(), get.min_zxid, get.linearizable),
        ("/x", 42, false)
    );
    let exists = exists_request("/x", ReadOptions::linearizable());
    assert_eq!((exists.min_zxid, exists.linearizable), (0, true));
    let options = ChildrenOptions {
        with_stats: true,
        page_size: 10,
        page_token: "tok".into(),
        read,
    };
    let children = children_request("/p", &options);
    assert_eq!(children.path, "/p");
    assert!(children.with_stats);
    assert_eq!(children.page_size, 10);
    assert_eq!(children.page_token, "tok");
    assert_eq!((children.min_zxid, children.linearizable), (42, false));
}

#[test]
fn write_options_reach_set_delete_and_multi() {
    let write = WriteOptions {
        session_id: 1,
        request_id: 2,
        fence: Some(Fence {
            key: "lock".into(),
            token: 3,
        }),
    };
    let set = set_request("/s", b"v".to_vec(), 4, &write);
    assert_eq!((set.version, set.session_id, set.request_id), (4, 1, 2));
    assert_eq!(set.fence, write.fence.clone().map(Into::into));
    let delete = delete_request("/d", ANY_VERSION, &write);
    assert_eq!(
        (delete.version, delete.session_id, delete.request_id),
        (-1, 1, 2)
    );
    let multi = multi_request(vec![crate::op::check("/c", 1)], &write);
    assert_eq!(multi.ops.len(), 1);
    assert_eq!((multi.session_id, multi.request_id), (1, 2));
    assert_eq!(multi.fence, write.fence.map(Into::into));
}

#[test]
fn watch_options_become_a_watch_request() {
    let options = WatchOptions {
        path: "/w".into(),
        recursive: true,
        kinds: vec![EventKind::Created, EventKind::Deleted],
        once: true,
        with_data: true,
        start_zxid: Some(17),
        initial_snapshot: false,
        progress_interval_ms: 250,
        resume: Some(RetryPolicy::default()),
    };
    let req = watch_request(&options);
    assert_eq!(req.path, "/w");
    assert!(req.recursive && req.once && req.with_data && !req.initial_snapshot);
    assert_eq!(
        req.kinds,
        vec![EventKind::Created as i32, EventKind::Deleted as i32]
    );
    assert_eq!(req.start_zxid, Some(17));
    assert_eq!(req.progress_interval_ms, 250);
    let plain = watch_request(&WatchOptions::path("/p"));
    assert_eq!(plain.start_zxid, None);
    assert!(plain.kinds.is_empty());
}

#[test]
fn retry_delays_double_up_to_the_max() {
    let policy = RetryPolicy {
        attempts_max: 3,
        elapsed_max_ms: 1_000,
        delay_initial_ms: 10,
        delay_max_ms: 35,
    };
    let delays: Vec<u64> = (1..=5)
        .map(|n| policy.delay(n).as_millis() as u64)
        .collect();
    assert_eq!(delays, vec![10, 20, 35, 35, 35]);
    // A huge attempt number saturates instead of overflowing.
    assert_eq!(policy.delay(u32::MAX).as_millis(), 35);
}

#[test]
fn jittered_delays_stay_in_the_upper_half_and_vary() {
    let policy = RetryPolicy {
        attempts_max: 0,
        elapsed_max_ms: 0,
        delay_initial_ms: 100,
        delay_max_ms: 1_000,
    };
    let draws: std::collections::BTreeSet<u128> = (0..200)
        .map(|_| policy.jittered_delay(2).as_millis())
        .collect();
    assert!(draws.iter().all(|d| (100..=200).contains(d)), "{draws:?}");
    assert!(draws.len() > 10, "no jitter: {draws:?}");
}

#[test]
fn retry_policy_bounds_attempts_and_time() {
    let policy = RetryPolicy {
        attempts_max: 3,
        elapsed_max_ms: 1_000,
        delay_initial_ms: 10,
        delay_max_ms: 35,
    };
    assert!(policy.allows(3, Duration::from_millis(999)));
    assert!(!policy.allows(4, Duration::ZERO));
    assert!(!policy.allows(1, Duration::from_millis(1_000)));
    let unbounded = RetryPolicy {
        attempts_max: 0,
        elapsed_max_ms: 0,
        ..policy
    };
    assert!(unbounded.allows(1_000_000, Duration::from_secs(86_400)));
}
