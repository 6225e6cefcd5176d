//! The SDK's LeaderSelector against a real server: with auto-requeue five selectors
//! take turns in queue order, one at a time; the take-leadership closure is cancelled
//! on Suspended (and leadership comes back after Reconnected) and on Lost; without
//! auto-requeue a selector leads once until `requeue`.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use concord::{
    Client, ConnectionState, ErrorCode, LatchState, LeaderSelector, Leadership, Session,
};
use concord_tests::{eventually, Server, ServerOptions};
use tokio::sync::{mpsc, watch};

const WAIT: Duration = Duration::from_secs(10);

async fn line(client: &Client, name: &str) -> Vec<String> {
    let all = client.participants(name).await.unwrap();
    all.into_iter().map(|p| p.participant_id).collect()
}

/// What the closures of the turn-taking test record.
#[derive(Default)]
struct Turns {
    /// Who led, in order.
    led: Mutex<Vec<String>>,
    /// Closures running now.
    running: AtomicUsize,
    /// Set if two closures ever ran at once.
    overlap: AtomicBool,
}

/// One running closure of the turn-taking test.
struct Running(Arc<Turns>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_auto_requeue_cycles_through_every_participant_in_queue_order() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let name = "turns";
    let turns = Arc::new(Turns::default());
    // The first leader holds on until everyone is in line.
    let (gate, gate_rx) = watch::channel(false);
    let mut sessions: Vec<Session> = Vec::new();
    let mut selectors = Vec::new();
    for n in 0..5 {
        let session = client.open_session(1_000).await.unwrap();
        let id = format!("s{n}");
        let (turns, gate_rx, who) = (turns.clone(), gate_rx.clone(), id.clone());
        let selector = LeaderSelector::new(&session, name, &id, move |_lead: Leadership| {
            let (turns, mut gate_rx, who) = (turns.clone(), gate_rx.clone(), who.clone());
            async move {
                if turns.running.fetch_add(1, Ordering::SeqCst) > 0 {
                    turns.overlap.store(true, Ordering::SeqCst);
                }
                // Counted down when the closure returns or is dropped (by close).
                let _running = Running(turns.clone());
                turns.led.lock().unwrap().push(who);
                let _ = gate_rx.wait_for(|open| *open).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(!selector.requeue(), "requeued before start");
        selector.auto_requeue(true);
        selector.start().unwrap();
        let want = n + 1;
        eventually("the selector in line", WAIT, || async {
            (line(&client, name).await.len() == want).then_some(())
        })
        .await;
        sessions.push(session);
        selectors.push(selector);
    }
    assert_eq!(line(&client, name).await, ["s0", "s1", "s2", "s3", "s4"]);
    assert!(selectors[0].has_leadership());
    assert!(selectors[1..].iter().all(|s| !s.has_leadership()));
    let listed = selectors[3].participants().await.unwrap();
    let leaders: Vec<bool> = listed.iter().map(|c| c.is_leader).collect();
    assert_eq!(leaders, [true, false, false, false, false]);
    assert_eq!(listed[0].participant.participant_id, "s0");
    let leader = selectors[4].leader().await.unwrap().unwrap();
    assert_eq!(leader.participant_id, "s0");

    gate.send_replace(true);
    eventually("two rounds", WAIT, || async {
        (turns.led.lock().unwrap().len() >= 10).then_some(())
    })
    .await;
    for selector in &selectors {
        selector.close().await.unwrap();
        assert_eq!(selector.state(), LatchState::Closed);
    }
    let led = turns.led.lock().unwrap().clone();
    let order = ["s0", "s1", "s2", "s3", "s4"];
    let want: Vec<&str> = order.iter().chain(order.iter()).copied().collect();
    assert_eq!(led[..10], want[..], "turns out of queue order");
    assert!(!turns.overlap.load(Ordering::SeqCst), "two leaders at once");
    // A selector closed while its requeued Campaign was in flight: the server removes
    // the cancelled call's candidacy once its join is applied.
    eventually("no candidate left", WAIT, || async {
        line(&client, name).await.is_empty().then_some(())
    })
    .await;
}

/// What a closure of the cancellation test reports.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Started(u64),
    /// `Leadership::cancelled()` fired (seen by a task the closure spawned).
    Cancelled,
    /// The closure's future was dropped.
    Dropped,
}

struct DropGuard(mpsc::UnboundedSender<Seen>);

impl Drop for DropGuard {
    fn drop(&mut self) {
        let _ = self.0.send(Seen::Dropped);
    }
}

/// A selector whose closure runs until cancelled, reporting what happens.
fn endless(session: &Session, name: &str) -> (LeaderSelector, mpsc::UnboundedReceiver<Seen>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let selector = LeaderSelector::new(session, name, "endless", move |lead: Leadership| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Seen::Started(lead.term()));
            let _guard = DropGuard(tx.clone());
            let watcher = lead.clone();
            tokio::spawn(async move {
                watcher.cancelled().await;
                let _ = tx.send(Seen::Cancelled);
            });
            std::future::pending::<()>().await;
        }
    });
    (selector, rx)
}

async fn seen(rx: &mut mpsc::UnboundedReceiver<Seen>, within: Duration) -> Seen {
    tokio::time::timeout(within, rx.recv())
        .await
        .expect("the closure to report in time")
        .unwrap()
}

/// The next two reports, in any order: the cancellation and the drop.
async fn cancelled_and_dropped(rx: &mut mpsc::UnboundedReceiver<Seen>, within: Duration) {
    let mut two = vec![seen(rx, within).await, seen(rx, within).await];
    two.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(two, [Seen::Cancelled, Seen::Dropped]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_the_closure_is_cancelled_on_suspended_and_on_lost() {
    let server = Server::start(ServerOptions {
        session_ttl_ms: Some((100, 4_000)),
        ..ServerOptions::default()
    });
    let client = server.sdk().await;
    let ttl = Duration::from_millis(3_000);
    let session = client.open_session(3_000).await.unwrap();
    let (selector, mut rx) = endless(&session, "cancel");
    selector.auto_requeue(true);
    selector.start().unwrap();
    let Seen::Started(first_term) = seen(&mut rx, WAIT).await else {
        panic!("the closure did not start first")
    };
    assert!(selector.has_leadership());

    // Suspended: the closure is told and dropped, before the TTL runs out.
    let mut states = session.listen();
    server.signal("STOP");
    let stopped = Instant::now();
    let first = tokio::time::timeout(ttl, rx.recv()).await;
    let leads = selector.has_leadership();
    let second = tokio::time::timeout(ttl, rx.recv()).await;
    server.signal("CONT");
    let mut two = vec![first.unwrap().unwrap(), second.unwrap().unwrap()];
    two.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(two, [Seen::Cancelled, Seen::Dropped]);
    assert!(stopped.elapsed() < ttl, "the stall outlived the TTL");
    assert!(!leads, "still leading after the closure was dropped");
    assert_eq!(states.next().await, Some(ConnectionState::Suspended));

    // Reconnected: the selector resigned and queued again, so it leads a new term.
    let Seen::Started(second_term) = seen(&mut rx, WAIT).await else {
        panic!("the closure did not start again")
    };
    assert!(second_term > first_term);
    assert_eq!(states.next().await, Some(ConnectionState::Reconnected));

    // Lost: cancelled again, and the selector ends.
    client.close_session(session.id()).await.unwrap();
    cancelled_and_dropped(&mut rx, WAIT).await;
    eventually("the selector to end", WAIT, || async {
        (selector.state() == LatchState::Closed).then_some(())
    })
    .await;
    assert!(!selector.has_leadership());
    assert!(!selector.requeue());
    assert!(
        tokio::time::timeout(Duration::from_millis(200), rx.recv())
            .await
            .unwrap_or(None)
            .is_none(),
        "the closure ran after Lost"
    );
}

/// A selector whose session is gone closes quietly, whether the selector had
/// already ended (the session closed under it) or the server cannot be reached at
/// all (a stall longer than the give-up time, twice the TTL: the session is lost on
/// the client's clock, and nothing is sent); closing it twice is BAD_STATE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_close_after_the_session_is_lost_succeeds_quietly() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let session = client.open_session(1_000).await.unwrap();
    let (selector, mut rx) = endless(&session, "gone");
    selector.start().unwrap();
    assert!(matches!(seen(&mut rx, WAIT).await, Seen::Started(_)));
    client.close_session(session.id()).await.unwrap();
    cancelled_and_dropped(&mut rx, WAIT).await;
    eventually("the selector to end", WAIT, || async {
        (selector.state() == LatchState::Closed).then_some(())
    })
    .await;
    selector.close().await.unwrap();
    let err = selector.close().await.unwrap_err();
    assert_eq!(err.code(), ErrorCode::BadState, "{err:?}");

    // Lost while the server is stopped: close sends nothing (a resign would time
    // out on the stopped server) and succeeds.
    let session = client.open_session(1_000).await.unwrap();
    let (selector, mut rx) = endless(&session, "stalled");
    selector.start().unwrap();
    assert!(matches!(seen(&mut rx, WAIT).await, Seen::Started(_)));
    server.signal("STOP");
    let lost = tokio::time::timeout(WAIT, session.ended()).await;
    let closed = selector.close().await;
    server.signal("CONT");
    assert_eq!(lost.unwrap(), ConnectionState::Lost);
    closed.unwrap();
    assert_eq!(selector.state(), LatchState::Closed);
}

/// When one closure of a participant ran: from its start to its return or drop.
#[derive(Default)]
struct Spans(Mutex<Vec<(&'static str, Instant, Option<Instant>)>>);

/// Records the end of the span it was made for when the closure's future goes.
struct SpanEnd(Arc<Spans>, usize);

impl Drop for SpanEnd {
    fn drop(&mut self) {
        self.0 .0.lock().unwrap()[self.1].2 = Some(Instant::now());
    }
}

/// A selector that leads until cancelled, recording each leadership's span.
fn recorded(session: &Session, who: &'static str, spans: &Arc<Spans>) -> LeaderSelector {
    let spans = spans.clone();
    LeaderSelector::new(session, "spans", who, move |lead: Leadership| {
        let spans = spans.clone();
        async move {
            let index = {
                let mut all = spans.0.lock().unwrap();
                all.push((who, Instant::now(), None));
                all.len() - 1
            };
            let _end = SpanEnd(spans, index);
            // Work that ends only when told to (Curator's interruption), then goes
            // on a little: were it left to run after the resign (the Python SDK's
            // gap), b would start while it runs.
            lead.cancelled().await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// Curator keeps leadership until takeLeadership has exited: the next participant's
/// closure must not start while a closed one still runs. close() drops the closure's
/// future (its end) before it resigns, so their spans never overlap. (This passed
/// before issue 46 too: the Rust selector never had the Python SDK's gap.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_a_closed_selectors_closure_has_ended_before_the_next_one_starts() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let spans = Arc::new(Spans::default());
    let (one, two) = (
        client.open_session(1_000).await.unwrap(),
        client.open_session(1_000).await.unwrap(),
    );
    let a = recorded(&one, "a", &spans);
    a.start().unwrap();
    eventually("a to lead", WAIT, || async {
        a.has_leadership().then_some(())
    })
    .await;
    let b = recorded(&two, "b", &spans);
    b.start().unwrap();
    eventually("b in line", WAIT, || async {
        (line(&client, "spans").await.len() == 2).then_some(())
    })
    .await;
    a.close().await.unwrap();
    eventually("b to lead", WAIT, || async {
        (spans.0.lock().unwrap().len() == 2).then_some(())
    })
    .await;
    b.close().await.unwrap();
    let all = spans.0.lock().unwrap().clone();
    let (a_span, b_span) = (all[0], all[1]);
    assert_eq!((a_span.0, b_span.0), ("a", "b"));
    let a_end = a_span.2.expect("a's closure ended");
    assert!(
        a_end <= b_span.1,
        "b started {:?} before a's closure ended",
        a_end - b_span.1
    );
}

/// Someone else resigns the leading selector's candidacy (an operator's Resign with
/// the key and term Leader shows): the selector follows its election while it leads,
/// so the closure is told and dropped at once, and with auto_requeue it leads again
/// with a new term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_the_closure_is_cancelled_when_someone_else_resigns_its_candidacy() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let session = client.open_session(10_000).await.unwrap();
    let (selector, mut rx) = endless(&session, "resigned");
    selector.auto_requeue(true);
    selector.start().unwrap();
    let Seen::Started(first_term) = seen(&mut rx, WAIT).await else {
        panic!("the closure did not start first")
    };
    let led = client.leader("resigned").await.unwrap().unwrap();
    assert_eq!(led.term, first_term);
    client.resign(&led.key, led.term).await.unwrap();
    cancelled_and_dropped(&mut rx, WAIT).await;
    let Seen::Started(second_term) = seen(&mut rx, WAIT).await else {
        panic!("the closure did not start again")
    };
    assert!(second_term > first_term);
    assert!(selector.has_leadership());
    selector.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_without_auto_requeue_a_selector_leads_once_until_requeued() {
    let server = Server::start(ServerOptions::default());
    let client = server.sdk().await;
    let session = client.open_session(1_000).await.unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let selector = LeaderSelector::new(&session, "once", "", move |lead: Leadership| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(lead.term());
        }
    });
    assert!(!selector.id().is_empty(), "an id is made up");
    selector.start().unwrap();
    assert!(selector.start().is_err(), "started twice");
    let first = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    // It resigned when the closure returned, and did not queue again.
    eventually("the selector to resign", WAIT, || async {
        line(&client, "once").await.is_empty().then_some(())
    })
    .await;
    assert!(tokio::time::timeout(Duration::from_millis(200), rx.recv())
        .await
        .is_err());
    assert!(selector.requeue());
    let second = tokio::time::timeout(WAIT, rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(second > first);
    selector.close().await.unwrap();
    assert!(selector.close().await.is_err(), "closed twice");
}

/// Selectors closed at every point of their Campaign's first milliseconds leave no
/// candidacy (a Campaign answered as `close` aborted it would lead for nobody until
/// the session ends): another session's selector leads at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t74_selectors_closed_while_campaigning_leave_no_candidacy() {
    let server = Server::start(ServerOptions::default());
    let c = server.sdk().await;
    let a = c.open_session(5000).await.unwrap();
    let b = c.open_session(5000).await.unwrap();
    // Leads until closed; the receiver turns true when its closure starts.
    let leads = |session: &Session, id: String| {
        let (led, leading) = watch::channel(false);
        let s = LeaderSelector::new(session, "closed", id, move |_lead: Leadership| {
            led.send_replace(true);
            std::future::pending::<()>()
        });
        (s, leading)
    };
    let leading = |mut leading: watch::Receiver<bool>| async move {
        let _ = leading.wait_for(|l| *l).await;
    };
    // How long a selector takes to lead a free election here (the median of five).
    let mut rounds = Vec::new();
    for n in 0..5 {
        let (s, led) = leads(&a, format!("timing-{n}"));
        let start = Instant::now();
        s.start().unwrap();
        tokio::time::timeout(WAIT, leading(led)).await.unwrap();
        rounds.push(start.elapsed());
        s.close().await.unwrap();
    }
    rounds.sort();
    let round = rounds[2];
    let (mut won, mut closed) = (0, 0);
    for n in 0..1000u32 {
        if closed >= 100 {
            break;
        }
        let (s, led) = leads(&a, format!("closed-{n}"));
        s.start().unwrap();
        // Every point from 0 to twice the time a selector takes to lead.
        let after = round * 2 * (n % 41) / 41;
        if tokio::time::timeout(after, leading(led)).await.is_ok() {
            won += 1;
        } else {
            closed += 1;
        }
        s.close().await.unwrap();
    }
    eprintln!("lead in {round:?}: {won} led before close, {closed} closed campaigning");
    assert!(
        closed >= 30,
        "only {closed} selectors were closed campaigning"
    );
    eventually("no candidacy is left", WAIT, || async {
        line(&c, "closed").await.is_empty().then_some(())
    })
    .await;
    let (other, led) = leads(&b, "other".into());
    other.start().unwrap();
    tokio::time::timeout(WAIT, leading(led))
        .await
        .expect("another session's selector leads at once");
    other.close().await.unwrap();
}
