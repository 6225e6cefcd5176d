//! Unit tests of the latch's decisions ([`Core`]) and its retry delays: no server.

use super::*;
use ConnectionState::{Connected, Lost, Reconnected, Suspended};

fn candidacy(term: u64) -> Participant {
    Participant {
        election: "e".into(),
        key: format!("/e/m{term:010}"),
        term,
        participant_id: "a".into(),
        ..Participant::default()
    }
}

#[test]
fn a_started_latch_campaigns_and_leads_when_it_wins_connected() {
    let (mut core, steps) = Core::new(Connected);
    assert_eq!(steps, vec![Step::Campaign]);
    assert_eq!(core.on_won(candidacy(7)), vec![Step::Lead(candidacy(7))]);
}

#[test]
fn a_latch_on_an_ended_session_ends_at_once() {
    assert_eq!(Core::new(Lost).1, vec![Step::End]);
}

#[test]
fn suspended_drops_leadership_and_reconnected_checks_before_leading_again() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    assert_eq!(core.on_state(Suspended), vec![Step::Unlead]);
    assert_eq!(core.on_state(Suspended), vec![]);
    assert_eq!(core.on_state(Reconnected), vec![Step::Check(candidacy(7))]);
    // A second Reconnected while the check is in flight sends no second check.
    assert_eq!(core.on_state(Reconnected), vec![]);
    assert_eq!(core.on_checked(true), vec![Step::Lead(candidacy(7))]);
}

#[test]
fn a_latch_no_longer_first_in_line_campaigns_again() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    core.on_state(Suspended);
    core.on_state(Reconnected);
    assert_eq!(core.on_checked(false), vec![Step::Campaign]);
    // The old place is forgotten: a later suspension has nothing to check.
    assert_eq!(core.on_state(Suspended), vec![]);
    assert_eq!(core.on_state(Reconnected), vec![]);
    assert_eq!(core.on_won(candidacy(9)), vec![Step::Lead(candidacy(9))]);
}

#[test]
fn a_deposed_leader_stops_leading_and_campaigns_again() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    assert_eq!(core.on_deposed(), vec![Step::Unlead, Step::Campaign]);
    // Its place is forgotten: nothing to check after a suspension.
    assert_eq!(core.on_state(Suspended), vec![]);
    assert_eq!(core.on_state(Reconnected), vec![]);
    // Not leading (suspended): a late report changes nothing.
    core.on_won(candidacy(9));
    core.on_state(Suspended);
    assert_eq!(core.on_deposed(), vec![]);
}

#[test]
fn a_win_seen_while_suspended_is_checked_after_reconnected() {
    let (mut core, _) = Core::new(Connected);
    core.on_state(Suspended);
    assert_eq!(core.on_won(candidacy(7)), vec![]);
    assert_eq!(core.on_state(Reconnected), vec![Step::Check(candidacy(7))]);
    assert_eq!(core.on_checked(true), vec![Step::Lead(candidacy(7))]);
}

#[test]
fn a_check_answered_after_a_new_suspension_does_not_lead() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    core.on_state(Suspended);
    core.on_state(Reconnected);
    core.on_state(Suspended);
    assert_eq!(core.on_checked(true), vec![]);
    assert_eq!(core.on_state(Reconnected), vec![Step::Check(candidacy(7))]);
}

#[test]
fn a_failed_check_is_sent_again_only_while_connected() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    core.on_state(Suspended);
    core.on_state(Reconnected);
    assert_eq!(core.on_check_failed(), vec![Step::Check(candidacy(7))]);
    core.on_state(Suspended);
    assert_eq!(core.on_check_failed(), vec![]);
}

#[test]
fn lost_unleads_then_ends() {
    let (mut core, _) = Core::new(Connected);
    core.on_won(candidacy(7));
    assert_eq!(core.on_state(Lost), vec![Step::Unlead, Step::End]);
    let (mut waiting, _) = Core::new(Connected);
    assert_eq!(waiting.on_state(Lost), vec![Step::End]);
}

#[test]
fn retry_delays_start_at_zero_double_and_stop_at_the_max() {
    assert_eq!(retry_delay(0), Duration::ZERO);
    assert_eq!(retry_delay(1), Duration::from_millis(RETRY_DELAY_MIN_MS));
    assert_eq!(
        retry_delay(2),
        Duration::from_millis(2 * RETRY_DELAY_MIN_MS)
    );
    assert_eq!(retry_delay(60), Duration::from_millis(RETRY_DELAY_MAX_MS));
}

#[test]
fn made_up_ids_differ() {
    assert_ne!(unique_id("latch", 1), unique_id("latch", 1));
}

#[test]
fn an_id_is_claimed_once_per_session_and_election_until_released() {
    let claim = Claim::take(7, "claims", "a").unwrap();
    let err = Claim::take(7, "claims", "a").unwrap_err();
    assert_eq!(err.code(), ErrorCode::NodeExists);
    let other_session = Claim::take(8, "claims", "a").unwrap();
    let other_election = Claim::take(7, "claims-2", "a").unwrap();
    drop(claim);
    let again = Claim::take(7, "claims", "a").unwrap();
    drop((again, other_session, other_election));
}
