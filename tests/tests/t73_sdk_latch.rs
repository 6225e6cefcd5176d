//! The SDK's LeaderLatch against a real server: five participants (one of them the
//! `leader_latch` example in its own process) have exactly one leader at any time and
//! hand over after close and after the leader's process is killed; Suspended drops
//! leadership and Reconnected brings it back to the latch still first in line; Lost
//! ends the latch.
//!
//! The example binary must be built (`cargo build -p concord --examples`;
//! `cargo test --workspace` builds it).

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord::{
    Client, CloseMode, ConnectionState, ErrorCode, LatchEvent, LatchListener, LatchState,
    LeaderLatch, Session,
};
use concord_tests::{eventually, Background, Server, ServerOptions};
use futures::StreamExt;

const WAIT: Duration = Duration::from_secs(10);

/// The `leader_latch` example next to this test's binary.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p concord --examples` first",
        path.display()
    );
    path
}

/// The ids of election `name`'s participants, leader first.
async fn line(client: &Client, name: &str) -> Vec<String> {
    let all = client.participants(name).await.unwrap();
    all.into_iter().map(|p| p.participant_id).collect()
}

/// The next latch event, within `WAIT`.
async fn next_event(listener: &mut LatchListener) -> Option<LatchEvent> {
    tokio::time::timeout(WAIT, listener.next())
        .await
        .expect("a latch event in time")
}

/// The in-process latches, checked every few ms: never two leaders at once, and
/// none while the example process leads.
struct Sampler {
    violations: Arc<Mutex<Vec<String>>>,
    samples: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    fn start(latches: Arc<Vec<LeaderLatch>>, outside_leads: Arc<AtomicBool>) -> Sampler {
        let violations = Arc::new(Mutex::new(Vec::new()));
        let samples = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (violations, samples, stop) = (violations.clone(), samples.clone(), stop.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let outside = outside_leads.load(Ordering::SeqCst);
                    let leading: Vec<&str> = latches
                        .iter()
                        .filter(|l| l.has_leadership())
                        .map(|l| l.id())
                        .collect();
                    if leading.len() + usize::from(outside) > 1 {
                        let seen = format!("leaders {leading:?}, the process too: {outside}");
                        violations.lock().unwrap().push(seen);
                    }
                    samples.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
        });
        Sampler {
            violations,
            samples,
            stop,
            task,
        }
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.unwrap();
        assert!(self.samples.load(Ordering::SeqCst) > 10);
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "two leaders at once: {violations:?}");
    }
}

/// Waits for the next leader change the observer saw, and checks that exactly the
/// latch it names (if in this process) says it leads.
async fn expect_leader(
    changes: &mut tokio::sync::mpsc::Receiver<Option<String>>,
    latches: &[LeaderLatch],
    want: Option<&str>,
) {
    let seen = tokio::time::timeout(WAIT, changes.recv())
        .await
        .expect("a leader change in time")
        .unwrap();
    assert_eq!(seen.as_deref(), want, "the server named another leader");
    let Some(want) = want else { return };
    if latches.iter().any(|l| l.id() == want) {
        eventually("the named latch to lead", WAIT, || async {
            leads(latches, want).then_some(())
        })
        .await;
    }
    for l in latches.iter().filter(|l| l.id() != want) {
        assert!(!l.has_leadership(), "{} leads besides {want}", l.id());
    }
}

fn leads(latches: &[LeaderLatch], id: &str) -> bool {
    latches.iter().any(|l| l.id() == id && l.has_leadership())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_five_latches_have_one_leader_at_a_time_and_hand_over() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let name = "five";
    // Every leader change, as the server orders them.
    let (tx, mut changes) = tokio::sync::mpsc::channel(64);
    let mut observed = client.observe(name).await.unwrap();
    let observer = tokio::spawn(async move {
        while let Some(Ok(change)) = observed.next().await {
            let id = change.leader.map(|p| p.participant_id);
            if tx.send(id).await.is_err() {
                return;
            }
        }
    });
    expect_leader(&mut changes, &[], None).await;

    // The first in line is the example, in its own process.
    let mut process = Background::spawn(Command::new(example("leader_latch")).args([
        &server.endpoint(),
        name,
        "ex",
        "1000",
    ]));
    process
        .wait_stdout("the process to lead", WAIT, |o| o.contains("leader ex"))
        .await;
    expect_leader(&mut changes, &[], Some("ex")).await;
    let outside_leads = Arc::new(AtomicBool::new(true));

    // Four more, in this process, each on its own session, queued in order.
    let mut sessions: Vec<Session> = Vec::new();
    let mut latches = Vec::new();
    let mut listeners = Vec::new();
    for n in 1..=4 {
        let session = client.open_session(1_000).await.unwrap();
        let latch = LeaderLatch::new(&session, name, format!("l{n}"));
        assert_eq!(latch.state(), LatchState::Latent);
        listeners.push(latch.listen());
        latch.start().unwrap();
        assert_eq!(latch.state(), LatchState::Started);
        let want = n + 1;
        eventually("the latch in line", WAIT, || async {
            (line(&client, name).await.len() == want).then_some(())
        })
        .await;
        sessions.push(session);
        latches.push(latch);
    }
    assert_eq!(line(&client, name).await, ["ex", "l1", "l2", "l3", "l4"]);
    let latches = Arc::new(latches);
    let sampler = Sampler::start(latches.clone(), outside_leads.clone());

    // kill -9 of the leading process: the next in line leads once its session expires.
    let killed = Instant::now();
    process.kill();
    outside_leads.store(false, Ordering::SeqCst);
    expect_leader(&mut changes, &latches, Some("l1")).await;
    assert!(killed.elapsed() < WAIT);
    assert!(latches[0].fence().is_some());
    let leader = latches[3].leader().await.unwrap().unwrap();
    assert_eq!(leader.participant_id, "l1");
    assert_eq!(Some(leader.term), latches[0].fence().map(|f| f.token));
    let ids: Vec<String> = latches[2]
        .participants()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.participant_id)
        .collect();
    assert_eq!(ids, ["l1", "l2", "l3", "l4"]);

    // close(NotifyLeader): l1's listener hears NotLeader; l2 leads.
    assert_eq!(
        next_event(&mut listeners[0]).await,
        Some(LatchEvent::IsLeader)
    );
    latches[0].close(CloseMode::NotifyLeader).await.unwrap();
    assert_eq!(latches[0].state(), LatchState::Closed);
    assert_eq!(
        next_event(&mut listeners[0]).await,
        Some(LatchEvent::NotLeader)
    );
    assert_eq!(next_event(&mut listeners[0]).await, None);
    expect_leader(&mut changes, &latches, Some("l2")).await;

    // close(Silent): nothing heard; l3 leads. Then l4 after l3.
    assert_eq!(
        next_event(&mut listeners[1]).await,
        Some(LatchEvent::IsLeader)
    );
    latches[1].close(CloseMode::Silent).await.unwrap();
    assert_eq!(next_event(&mut listeners[1]).await, None);
    expect_leader(&mut changes, &latches, Some("l3")).await;
    latches[2].close(CloseMode::Silent).await.unwrap();
    expect_leader(&mut changes, &latches, Some("l4")).await;
    // A waiting latch that closes leaves the line too.
    let session = client.open_session(1_000).await.unwrap();
    let waiting = LeaderLatch::new(&session, name, "late");
    waiting.start().unwrap();
    eventually("the late latch in line", WAIT, || async {
        (line(&client, name).await == ["l4", "late"]).then_some(())
    })
    .await;
    assert!(!waiting
        .wait_timeout(Duration::from_millis(200))
        .await
        .unwrap());
    waiting.close(CloseMode::Silent).await.unwrap();
    assert!(waiting.wait().await.is_err());
    latches[3].close(CloseMode::Silent).await.unwrap();
    expect_leader(&mut changes, &latches, None).await;
    eventually("no candidate left", WAIT, || async {
        line(&client, name).await.is_empty().then_some(())
    })
    .await;

    sampler.finish().await;
    observer.abort();
    let stdout = process.stdout();
    assert!(
        !stdout.contains("not-leader ex"),
        "killed, not closed: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_suspended_drops_leadership_and_the_first_in_line_leads_again() {
    let server = Server::start(ServerOptions {
        session_ttl_ms: Some((100, 4_000)),
        ..ServerOptions::default()
    });
    let client = server.sdk().await;
    let ttl = Duration::from_millis(3_000);
    let first = client.open_session(3_000).await.unwrap();
    let second = client.open_session(3_000).await.unwrap();
    let a = LeaderLatch::new(&first, "stall", "a");
    let mut events = a.listen();
    a.start().unwrap();
    a.wait().await.unwrap();
    let b = LeaderLatch::new(&second, "stall", "b");
    b.start().unwrap();
    eventually("b in line", WAIT, || async {
        (line(&client, "stall").await == ["a", "b"]).then_some(())
    })
    .await;
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::IsLeader));
    let term = a.fence().unwrap().token;

    // A stall shorter than the TTL: Suspended drops leadership at once.
    let mut states = first.listen();
    server.signal("STOP");
    let stopped = Instant::now();
    let dropped = tokio::time::timeout(ttl, events.next()).await;
    let (a_leads, b_leads, fence) = (a.has_leadership(), b.has_leadership(), a.fence());
    server.signal("CONT");
    assert_eq!(
        dropped.expect("NotLeader within the TTL"),
        Some(LatchEvent::NotLeader)
    );
    assert!(stopped.elapsed() < ttl, "the stall outlived the TTL");
    assert!(!a_leads && !b_leads && fence.is_none());
    assert_eq!(states.next().await, Some(ConnectionState::Suspended));

    // Reconnected: a is still first in line, so it leads again with the same term.
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::IsLeader));
    assert_eq!(states.next().await, Some(ConnectionState::Reconnected));
    assert_eq!(a.fence().unwrap().token, term);
    assert!(!b.has_leadership());
    assert_eq!(line(&client, "stall").await, ["a", "b"]);
    a.close(CloseMode::Silent).await.unwrap();
    assert!(b.wait_timeout(WAIT).await.unwrap());
    b.close(CloseMode::Silent).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_lost_ends_the_latch_and_the_next_leads() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let first = client.open_session(1_000).await.unwrap();
    let second = client.open_session(1_000).await.unwrap();
    let a = LeaderLatch::new(&first, "lost", "a");
    let mut events = a.listen();
    a.start().unwrap();
    assert!(a.start().is_err(), "started twice");
    assert!(a.wait_timeout(WAIT).await.unwrap());
    let b = LeaderLatch::new(&second, "lost", "b");
    b.start().unwrap();
    assert!(!b.wait_timeout(Duration::from_millis(200)).await.unwrap());
    // A second latch of the same session and id would share b's place: refused.
    let twin = LeaderLatch::new(&second, "lost", "b");
    assert_eq!(twin.start().unwrap_err().code(), ErrorCode::NodeExists);

    // The session ends under the latch: it stops leading, and ends.
    client.close_session(first.id()).await.unwrap();
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::IsLeader));
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::NotLeader));
    assert_eq!(next_event(&mut events).await, None);
    assert_eq!(a.state(), LatchState::Closed);
    assert!(!a.has_leadership());
    let err = a.wait().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::SessionExpired, "{err}");
    // The latch may end first (its place went with the session, and its Campaign
    // again was refused SESSION_EXPIRED): the session's keep-alives then learn it.
    eventually("the session to be lost", WAIT, || async {
        (first.state() == ConnectionState::Lost).then_some(())
    })
    .await;
    // Closing a latch its session ended is no error (nothing is left to resign);
    // closing it twice is.
    a.close(CloseMode::Silent).await.unwrap();
    assert_eq!(
        a.close(CloseMode::Silent).await.unwrap_err().code(),
        ErrorCode::BadState
    );
    assert!(b.wait_timeout(WAIT).await.unwrap());
    b.close(CloseMode::Silent).await.unwrap();
}

/// Someone else resigns the leading latch's candidacy (an operator's Resign with the
/// key and term Leader shows): the latch follows its election while it leads, so it
/// stops leading at once (NotLeader) instead of claiming a leadership it lost, and
/// campaigns again: with the other latch now first, it queues behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_a_latch_whose_candidacy_is_resigned_by_someone_else_stops_leading() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let first = client.open_session(10_000).await.unwrap();
    let second = client.open_session(10_000).await.unwrap();
    let a = LeaderLatch::new(&first, "deposed", "a");
    let mut events = a.listen();
    a.start().unwrap();
    assert!(a.wait_timeout(WAIT).await.unwrap());
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::IsLeader));
    let b = LeaderLatch::new(&second, "deposed", "b");
    b.start().unwrap();
    eventually("two in line", WAIT, || async {
        (line(&client, "deposed").await.len() == 2).then_some(())
    })
    .await;
    let led = client.leader("deposed").await.unwrap().unwrap();
    assert_eq!(led.participant_id, "a");

    client.resign(&led.key, led.term).await.unwrap();
    assert_eq!(next_event(&mut events).await, Some(LatchEvent::NotLeader));
    assert!(!a.has_leadership());
    assert!(b.wait_timeout(WAIT).await.unwrap());
    // It campaigned again: in line behind b, with a new place.
    eventually("a in line behind b", WAIT, || async {
        (line(&client, "deposed").await == ["b", "a"]).then_some(())
    })
    .await;
    assert!(!a.has_leadership());
    b.close(CloseMode::Silent).await.unwrap();
    assert!(a.wait_timeout(WAIT).await.unwrap());
    assert_ne!(a.fence().unwrap().token, led.term, "a new term");
    a.close(CloseMode::Silent).await.unwrap();
}

/// Latches closed at every point of their Campaign's first milliseconds (the moment
/// the server answers it leader included) leave no candidacy: another session's latch
/// leads at once. A Campaign answered as `close` aborted it would otherwise lead for
/// nobody until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t73_latches_closed_while_campaigning_leave_no_candidacy() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(5000).await.unwrap();
    let b = c.open_session(5000).await.unwrap();
    // How long a latch takes to lead a free election here (the median of five).
    let mut rounds = Vec::new();
    for n in 0..5 {
        let latch = LeaderLatch::new(&a, "closed", format!("timing-{n}"));
        let start = Instant::now();
        latch.start().unwrap();
        latch.wait().await.unwrap();
        rounds.push(start.elapsed());
        latch.close(CloseMode::Silent).await.unwrap();
    }
    rounds.sort();
    let round = rounds[2];
    let (mut led, mut closed) = (0, 0);
    for n in 0..1000u32 {
        if closed >= 100 {
            break;
        }
        let latch = LeaderLatch::new(&a, "closed", format!("closed-{n}"));
        latch.start().unwrap();
        // Every point from 0 to twice the time a latch takes to lead.
        let after = round * 2 * (n % 41) / 41;
        if latch.wait_timeout(after).await.unwrap() {
            led += 1;
        } else {
            closed += 1;
        }
        latch.close(CloseMode::Silent).await.unwrap();
    }
    eprintln!("lead in {round:?}: {led} led before close, {closed} closed campaigning");
    assert!(
        closed >= 30,
        "only {closed} latches were closed campaigning"
    );
    eventually("no candidacy is left", WAIT, || async {
        c.participants("closed")
            .await
            .unwrap()
            .is_empty()
            .then_some(())
    })
    .await;
    let other = LeaderLatch::new(&b, "closed", "other");
    other.start().unwrap();
    assert!(
        other.wait_timeout(WAIT).await.unwrap(),
        "another session's latch leads at once"
    );
    other.close(CloseMode::Silent).await.unwrap();
}
