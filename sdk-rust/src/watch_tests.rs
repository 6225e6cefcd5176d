//! Tests of the watch cursor: resume points and duplicate suppression.

use super::*;
use concord_proto::v1::{Progress, SnapshotDone, SnapshotNode, WatchEvent, WatchStarted};

fn event(zxid: u64) -> Msg {
    Msg::Event(WatchEvent {
        zxid,
        ..WatchEvent::default()
    })
}

fn started(zxid: u64) -> Msg {
    Msg::Started(WatchStarted { zxid, watch_id: 1 })
}

fn progress(zxid: u64) -> Msg {
    Msg::Progress(Progress { zxid })
}

#[test]
fn started_sets_the_resume_point_of_a_live_watch() {
    let mut cursor = Cursor::new(None, false);
    assert_eq!(cursor.resume_from().expect("resumable"), None);
    assert!(cursor.accept(&started(10)));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(10));
    // A second Started (after a resume) does not move it back.
    assert!(cursor.accept(&event(12)));
    assert!(cursor.accept(&progress(12)));
    assert!(cursor.accept(&started(5)));
    assert_eq!(cursor.last_zxid, Some(12));
}

#[test]
fn start_zxid_is_the_first_resume_point() {
    let mut cursor = Cursor::new(Some(7), false);
    assert!(cursor.accept(&started(20)));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(7));
}

#[test]
fn complete_txn_resumes_from_its_zxid() {
    let mut cursor = Cursor::new(None, false);
    cursor.accept(&started(1));
    assert!(cursor.accept(&event(3)));
    assert!(cursor.accept(&event(4)));
    // Event 4 may have siblings; event 5 would prove it complete, and so does Progress.
    assert!(cursor.accept(&progress(4)));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(4));
    // Replayed events at or below 4 are dropped.
    assert!(!cursor.accept(&event(4)));
    assert!(!cursor.accept(&event(2)));
    assert!(cursor.accept(&event(5)));
}

#[test]
fn break_inside_a_txn_resumes_before_it_and_skips_what_was_seen() {
    let mut cursor = Cursor::new(None, false);
    cursor.accept(&started(1));
    assert!(cursor.accept(&event(8)));
    assert!(cursor.accept(&event(9)));
    assert!(cursor.accept(&event(9)));
    // Two of zxid 9's events were delivered, the txn may have a third.
    assert_eq!(cursor.resume_from().expect("resumable"), Some(8));
    // The replay from 8 sends all three events of 9, then 10.
    assert!(!cursor.accept(&event(9)));
    assert!(!cursor.accept(&event(9)));
    assert!(cursor.accept(&event(9)));
    assert!(cursor.accept(&event(10)));
    assert_eq!(cursor.events_delivered, 5);
}

#[test]
fn resume_twice_before_the_replay_arrives_skips_the_same_events() {
    let mut cursor = Cursor::new(None, false);
    cursor.accept(&event(9));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(8));
    // The new stream broke before replaying anything: the plan is the same.
    assert_eq!(cursor.resume_from().expect("resumable"), Some(8));
    assert!(!cursor.accept(&event(9)));
    assert!(cursor.accept(&event(9)));
}

#[test]
fn progress_advances_an_idle_watch() {
    let mut cursor = Cursor::new(None, false);
    cursor.accept(&started(3));
    assert!(cursor.accept(&progress(40)));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(40));
    // An older progress never moves it back.
    cursor.accept(&progress(30));
    assert_eq!(cursor.last_zxid, Some(40));
}

#[test]
fn snapshot_done_sets_the_resume_point() {
    let mut cursor = Cursor::new(None, true);
    cursor.accept(&started(50));
    assert!(cursor.accept(&Msg::SnapshotNode(SnapshotNode::default())));
    assert!(cursor.resume_from().is_err(), "no resume mid-snapshot");
    assert!(cursor.accept(&Msg::SnapshotDone(SnapshotDone { zxid: 50 })));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(50));
}

#[test]
fn first_txn_resumes_from_zero() {
    let mut cursor = Cursor::new(Some(0), false);
    assert!(!cursor.accept(&event(0)), "zxid 0 is not after the start");
    assert!(cursor.accept(&event(1)));
    assert_eq!(cursor.resume_from().expect("resumable"), Some(0));
    assert!(!cursor.accept(&event(1)));
    assert!(cursor.accept(&event(1)));
}
