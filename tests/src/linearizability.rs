//! A linearizability checker for the history of one key: Wing and Gong's search with
//! Lowe's memoization (the algorithm porcupine implements), for histories that
//! clients record against real servers.
//!
//! Each operation has a call time, a return time and an outcome: `Ok(output)`,
//! `Failed` (the server said nothing was done: the operation is left out), or
//! `Unknown` (a timeout, a lost connection, OUTCOME_UNKNOWN: it may have taken effect,
//! once, at any point after its call, or never). A history is linearizable if some
//! order of its operations (every `Ok` one, any subset of the `Unknown` ones) keeps
//! real-time order (one that returned before another was called comes first) and,
//! run one at a time on the model from its initial state, gives every `Ok` output.
//!
//! ```text
//!   events in time order: call a, call b, return a, call c, return b, ...
//!   search: take the first call whose op the model accepts (and whose (done set,
//!   state) is new), lift it; meeting a return whose call is not lifted: undo the last
//!   lift and try the next call; no return left: linearizable; nothing left to undo:
//!   not.
//! ```
//!
//! Operations on different keys are independent (linearizability is compositional),
//! so a history is checked key by key (`check_keys`). The search is bounded in steps:
//! past the bound it answers `Undecided`, never a guess.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;

/// What a server answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome<O> {
    /// Done, with this output.
    Ok(O),
    /// Not done (a definite error): left out of the history.
    Failed,
    /// Done or not: a timeout, a dropped connection, OUTCOME_UNKNOWN.
    Unknown,
}

/// One operation of a history: `call` and `ret` are times on one clock (a counter
/// or nanoseconds); `ret` is ignored when the outcome is `Unknown`.
#[derive(Clone, Debug)]
pub struct Op<I, O> {
    pub input: I,
    pub outcome: Outcome<O>,
    pub call: u64,
    pub ret: u64,
}

/// An operation on `M`'s inputs and outputs.
pub type ModelOp<M> = Op<<M as Model>::Input, <M as Model>::Output>;

/// A sequential specification: the state an operation leaves, given the output it
/// had (`None`: not known, any output will do); `None` if the output is impossible.
pub trait Model {
    type State: Clone + Eq + Hash + Debug;
    type Input: Debug;
    type Output: Debug;
    fn init(&self) -> Self::State;
    fn step(
        &self,
        state: &Self::State,
        input: &Self::Input,
        output: Option<&Self::Output>,
    ) -> Option<Self::State>;
}

/// Why a history is not shown linearizable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No order explains it: at most `linearized` of its operations could be put in
    /// order before the search ran out.
    NotLinearizable { linearized: usize, ops: usize },
    /// The search passed its step bound.
    Undecided { steps: u64 },
}

/// Search steps per key before `Undecided`.
pub const STEPS_MAX: u64 = 10_000_000;

#[derive(Clone, Copy, Debug)]
enum Event {
    Call(usize),
    Return(usize),
}

/// The events as a doubly linked list that entries can be lifted out of and put back
/// (in the reverse order) in O(1). Index `len` is the head, `len + 1` the end.
struct Events {
    events: Vec<Event>,
    next: Vec<usize>,
    prev: Vec<usize>,
    /// Where each op's call and return sit in `events`.
    call_at: Vec<usize>,
    return_at: Vec<Option<usize>>,
}

impl Events {
    fn new(events: Vec<Event>, ops: usize) -> Events {
        let n = events.len();
        let mut call_at = vec![0; ops];
        let mut return_at = vec![None; ops];
        for (i, e) in events.iter().enumerate() {
            match *e {
                Event::Call(op) => call_at[op] = i,
                Event::Return(op) => return_at[op] = Some(i),
            }
        }
        // Events 0..n in order, then the head (n) and the end (n + 1).
        let (head, end) = (n, n + 1);
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.checked_sub(1).unwrap_or(head)).collect();
        if let Some(last) = n.checked_sub(1) {
            next[last] = end;
        }
        next.extend([if n == 0 { end } else { 0 }, end]);
        prev.extend([head, n.checked_sub(1).unwrap_or(head)]);
        Events {
            events,
            next,
            prev,
            call_at,
            return_at,
        }
    }

    fn first(&self) -> usize {
        self.next[self.events.len()]
    }

    fn is_end(&self, i: usize) -> bool {
        i == self.events.len() + 1
    }

    fn unlink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        self.next[p] = n;
        self.prev[n] = p;
    }

    fn relink(&mut self, i: usize) {
        let (p, n) = (self.prev[i], self.next[i]);
        self.next[p] = i;
        self.prev[n] = i;
    }

    fn lift(&mut self, op: usize) {
        self.unlink(self.call_at[op]);
        if let Some(r) = self.return_at[op] {
            self.unlink(r);
        }
    }

    fn unlift(&mut self, op: usize) {
        if let Some(r) = self.return_at[op] {
            self.relink(r);
        }
        self.relink(self.call_at[op]);
    }
}

/// Checks one key's history against `model`.
pub fn check<M: Model>(model: &M, history: &[ModelOp<M>]) -> Result<(), Verdict> {
    let ops: Vec<&ModelOp<M>> = history
        .iter()
        .filter(|op| !matches!(op.outcome, Outcome::Failed))
        .collect();
    // Calls before returns at the same time: ops that touch in time overlap.
    let mut timed: Vec<(u64, u8, Event)> = Vec::with_capacity(2 * ops.len());
    for (i, op) in ops.iter().enumerate() {
        timed.push((op.call, 0, Event::Call(i)));
        if !matches!(op.outcome, Outcome::Unknown) {
            timed.push((op.ret.max(op.call), 1, Event::Return(i)));
        }
    }
    timed.sort_by_key(|(t, kind, _)| (*t, *kind));
    let returns = timed.iter().filter(|(_, kind, _)| *kind == 1).count();
    let mut events = Events::new(timed.into_iter().map(|(_, _, e)| e).collect(), ops.len());

    let mut state = model.init();
    let mut done = vec![0u64; ops.len().div_ceil(64)];
    let mut seen: HashSet<(Vec<u64>, M::State)> = HashSet::new();
    // Lifted ops, with the state before each, and how many of them had returns.
    let mut stack: Vec<(usize, M::State)> = Vec::new();
    let mut returns_lifted = 0;
    let mut best = 0;
    let mut steps = 0u64;
    let mut entry = events.first();
    loop {
        if returns_lifted == returns {
            return Ok(());
        }
        steps += 1;
        if steps > STEPS_MAX {
            return Err(Verdict::Undecided { steps });
        }
        let event = if events.is_end(entry) {
            None
        } else {
            Some(events.events[entry])
        };
        match event {
            Some(Event::Call(op)) => {
                let output = match &ops[op].outcome {
                    Outcome::Ok(o) => Some(o),
                    _ => None,
                };
                let next_state = model.step(&state, &ops[op].input, output);
                let mut lifted = false;
                if let Some(next_state) = next_state {
                    done[op / 64] |= 1 << (op % 64);
                    if seen.insert((done.clone(), next_state.clone())) {
                        stack.push((op, std::mem::replace(&mut state, next_state)));
                        events.lift(op);
                        if events.return_at[op].is_some() {
                            returns_lifted += 1;
                        }
                        best = best.max(stack.len());
                        lifted = true;
                    } else {
                        done[op / 64] &= !(1 << (op % 64));
                    }
                }
                entry = if lifted {
                    events.first()
                } else {
                    events.next[entry]
                };
            }
            Some(Event::Return(_)) | None => {
                // An op returned before any order could take its call (or the calls
                // left cannot be taken at all): undo the last lift.
                let Some((op, before)) = stack.pop() else {
                    return Err(Verdict::NotLinearizable {
                        linearized: best,
                        ops: ops.len(),
                    });
                };
                state = before;
                done[op / 64] &= !(1 << (op % 64));
                events.unlift(op);
                if events.return_at[op].is_some() {
                    returns_lifted -= 1;
                }
                entry = events.next[events.call_at[op]];
            }
        }
    }
}

/// Checks each key's history on its own; the first key that fails, with its verdict.
pub fn check_keys<K: Ord + Clone, M: Model>(
    model: &M,
    history: impl IntoIterator<Item = (K, ModelOp<M>)>,
) -> Result<(), (K, Verdict)> {
    let mut by_key: BTreeMap<K, Vec<ModelOp<M>>> = BTreeMap::new();
    for (key, op) in history {
        by_key.entry(key).or_default().push(op);
    }
    for (key, ops) in &by_key {
        check(model, ops).map_err(|v| (key.clone(), v))?;
    }
    Ok(())
}

/// A Concord node as a register with a version (ZooKeeper's rules: a create makes
/// version 0, each set adds one, a set or delete may name the version it expects).
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeModel;

/// An operation on one node; values stand for the node's data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeInput {
    Create(u64),
    /// `version`: the version the set expects (-1 in the API: any).
    Set {
        value: u64,
        version: Option<i32>,
    },
    Delete {
        version: Option<i32>,
    },
    /// A read that must be linearizable (a `linearizable` read or Sync then read).
    Get,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NodeOutput {
    Created,
    NodeExists,
    /// A set that took: the node's new version.
    Set {
        version: i32,
    },
    Deleted,
    NoNode,
    BadVersion,
    /// A read: the value and version, or no node.
    Value(Option<(u64, i32)>),
}

impl Model for NodeModel {
    /// (value, version), or no node.
    type State = Option<(u64, i32)>;
    type Input = NodeInput;
    type Output = NodeOutput;

    fn init(&self) -> Self::State {
        None
    }

    fn step(
        &self,
        state: &Self::State,
        input: &NodeInput,
        output: Option<&NodeOutput>,
    ) -> Option<Self::State> {
        let expects = |version: &Option<i32>, have: i32| version.is_none_or(|v| v == have);
        let (out, next) = match (input, *state) {
            (NodeInput::Create(v), None) => (NodeOutput::Created, Some((*v, 0))),
            (NodeInput::Create(_), Some(_)) => (NodeOutput::NodeExists, *state),
            (NodeInput::Set { .. } | NodeInput::Delete { .. }, None) => (NodeOutput::NoNode, None),
            (NodeInput::Set { value, version }, Some((_, have))) if expects(version, have) => (
                NodeOutput::Set { version: have + 1 },
                Some((*value, have + 1)),
            ),
            (NodeInput::Delete { version }, Some((_, have))) if expects(version, have) => {
                (NodeOutput::Deleted, None)
            }
            (NodeInput::Set { .. } | NodeInput::Delete { .. }, Some(_)) => {
                (NodeOutput::BadVersion, *state)
            }
            (NodeInput::Get, s) => (NodeOutput::Value(s), s),
        };
        match output {
            Some(o) if *o != out => None,
            _ => Some(next),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NodeInput::*;
    use super::*;

    type NodeOp = Op<NodeInput, NodeOutput>;

    fn op(call: u64, ret: u64, input: NodeInput, outcome: Outcome<NodeOutput>) -> NodeOp {
        Op {
            input,
            outcome,
            call,
            ret,
        }
    }

    fn ok(call: u64, ret: u64, input: NodeInput, output: NodeOutput) -> NodeOp {
        op(call, ret, input, Outcome::Ok(output))
    }

    fn read(call: u64, ret: u64, value: Option<(u64, i32)>) -> NodeOp {
        ok(call, ret, Get, NodeOutput::Value(value))
    }

    fn set(value: u64) -> NodeInput {
        Set {
            value,
            version: None,
        }
    }

    fn verdict(history: &[NodeOp]) -> Result<(), Verdict> {
        check(&NodeModel, history)
    }

    #[test]
    fn a_sequential_history_that_follows_the_model_is_linearizable() {
        let h = [
            ok(0, 1, Create(1), NodeOutput::Created),
            read(2, 3, Some((1, 0))),
            ok(4, 5, set(2), NodeOutput::Set { version: 1 }),
            read(6, 7, Some((2, 1))),
            ok(8, 9, Delete { version: None }, NodeOutput::Deleted),
            read(10, 11, None),
        ];
        assert_eq!(verdict(&h), Ok(()));
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_write_is_not() {
        let h = [
            ok(0, 1, Create(1), NodeOutput::Created),
            ok(2, 3, set(2), NodeOutput::Set { version: 1 }),
            read(4, 5, Some((1, 0))),
        ];
        assert!(matches!(
            verdict(&h),
            Err(Verdict::NotLinearizable { ops: 3, .. })
        ));
    }

    #[test]
    fn a_read_overlapping_a_write_may_see_either_value() {
        for seen in [Some((1, 0)), Some((2, 1))] {
            let h = [
                ok(0, 1, Create(1), NodeOutput::Created),
                ok(2, 6, set(2), NodeOutput::Set { version: 1 }),
                read(3, 5, seen),
            ];
            assert_eq!(verdict(&h), Ok(()), "{seen:?}");
        }
        // But once a read saw the new value, a later read may not see the old one.
        let h = [
            ok(0, 1, Create(1), NodeOutput::Created),
            ok(2, 10, set(2), NodeOutput::Set { version: 1 }),
            read(3, 4, Some((2, 1))),
            read(5, 6, Some((1, 0))),
        ];
        assert!(verdict(&h).is_err());
    }

    #[test]
    fn an_unknown_write_may_have_happened_or_not_but_not_both() {
        let base = [
            ok(0, 1, Create(1), NodeOutput::Created),
            op(2, 3, set(2), Outcome::Unknown),
        ];
        for later in [Some((1, 0)), Some((2, 1))] {
            let mut h = base.to_vec();
            h.push(read(10, 11, later));
            assert_eq!(verdict(&h), Ok(()), "{later:?}");
        }
        // Visible long after it was called (it has no return).
        let mut h = base.to_vec();
        h.extend([read(10, 11, Some((1, 0))), read(20, 21, Some((2, 1)))]);
        assert_eq!(verdict(&h), Ok(()));
        // Seen, then unseen: it cannot have happened twice or been undone.
        let mut h = base.to_vec();
        h.extend([read(10, 11, Some((2, 1))), read(20, 21, Some((1, 0)))]);
        assert!(verdict(&h).is_err());
    }

    #[test]
    fn a_failed_write_is_never_seen() {
        let h = [
            ok(0, 1, Create(1), NodeOutput::Created),
            op(2, 3, set(2), Outcome::Failed),
            read(4, 5, Some((2, 1))),
        ];
        assert!(verdict(&h).is_err());
    }

    #[test]
    fn two_sets_expecting_the_same_version_cannot_both_take() {
        let cas = |value| Set {
            value,
            version: Some(0),
        };
        let mut h = vec![
            ok(0, 1, Create(1), NodeOutput::Created),
            ok(2, 5, cas(2), NodeOutput::Set { version: 1 }),
            ok(3, 6, cas(3), NodeOutput::BadVersion),
        ];
        assert_eq!(verdict(&h), Ok(()));
        h[2] = ok(3, 6, cas(3), NodeOutput::Set { version: 1 });
        assert!(verdict(&h).is_err());
    }

    /// Histories made by running ops one at a time at random points inside random,
    /// overlapping intervals are linearizable; changing one read to a value no write
    /// made never is.
    #[test]
    fn random_concurrent_histories_made_from_a_real_order_pass_and_a_wrong_read_fails() {
        let mut rng = concord_server::zab::rng::Rng::new(42);
        for round in 0..200 {
            let mut state = None;
            let mut history = Vec::new();
            let mut t = 100u64;
            for i in 0..30u64 {
                let input = match rng.below(5) {
                    0 => Create(i),
                    1 => Delete { version: None },
                    2 => Set {
                        value: i,
                        version: state.map(|(_, v): (u64, i32)| v - rng.below(2) as i32),
                    },
                    _ => Get,
                };
                // The op takes effect at t; its interval spreads around it.
                t += 10;
                let (call, ret) = (t - rng.below(25), t + rng.below(25));
                let (output, next) = apply(&state, &input);
                state = next;
                let outcome = if !matches!(input, Get) && rng.chance(100) {
                    Outcome::Unknown
                } else {
                    Outcome::Ok(output)
                };
                history.push(op(call, ret, input, outcome));
            }
            assert_eq!(verdict(&history), Ok(()), "round {round}: {history:?}");
            if let Some(i) = history.iter().position(|o| o.input == Get) {
                history[i].outcome = Outcome::Ok(NodeOutput::Value(Some((999, 0))));
                assert!(verdict(&history).is_err(), "round {round}");
            }
        }
    }

    /// The model run on its own: (output, next state).
    fn apply(state: &Option<(u64, i32)>, input: &NodeInput) -> (NodeOutput, Option<(u64, i32)>) {
        let outputs = [
            NodeOutput::Created,
            NodeOutput::NodeExists,
            NodeOutput::Deleted,
            NodeOutput::NoNode,
            NodeOutput::BadVersion,
            NodeOutput::Value(*state),
        ];
        let versions = (0..1000).map(|version| NodeOutput::Set { version });
        outputs
            .into_iter()
            .chain(versions)
            .find_map(|o| NodeModel.step(state, input, Some(&o)).map(|s| (o, s)))
            .unwrap()
    }

    #[test]
    fn histories_are_checked_key_by_key() {
        let history = [
            ("a", ok(0, 1, Create(1), NodeOutput::Created)),
            ("b", read(2, 3, None)),
            ("a", read(2, 3, Some((1, 0)))),
            ("b", read(4, 5, Some((7, 0)))),
        ];
        let failed = check_keys(&NodeModel, history).unwrap_err();
        assert_eq!(failed.0, "b");
    }
}
