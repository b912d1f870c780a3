//! The waiting room's tickets, announcements and lingering subscriptions.

use std::time::Duration;

use super::*;

/// Whether `place` is woken by an announcement within `within`.
async fn woken(place: &Place, within: Duration) -> bool {
    tokio::time::timeout(within, place.released().notified())
        .await
        .is_ok()
}

/// Long enough for a wake-up that is due; short enough to wait out one that is not.
const DUE: Duration = Duration::from_secs(1);
const NOT_DUE: Duration = Duration::from_millis(50);

#[tokio::test]
async fn a_lock_handed_to_a_ticket_is_known_to_that_waiter_only_and_once() {
    let room = WaitingRoom::in_process();
    let (head_token, other_token) = (OwnerToken::new(), OwnerToken::new());
    let head = room.take_ticket("k", head_token, Wakes::Head);
    let other = room.take_ticket("k", other_token, Wakes::Named);
    head.enqueued();

    room.announce(
        "k",
        Announcement::Handed {
            to: head_token,
            fence: Some(FencingToken::new(7)),
        },
    );

    assert!(woken(&head, DUE).await);
    assert_eq!(other.handed(), None);
    assert_eq!(head.handed(), Some(Some(FencingToken::new(7))));
    assert_eq!(head.handed(), None, "told once");
}

#[tokio::test]
async fn an_announcement_before_the_wait_is_not_lost() {
    let room = WaitingRoom::in_process();
    let place = room.take_ticket("k", OwnerToken::new(), Wakes::Head);

    room.announce("k", Announcement::Free);

    assert!(woken(&place, DUE).await);
}

#[tokio::test]
async fn fair_announcements_wake_only_the_named_ticket() {
    let room = WaitingRoom::in_process();
    let (a, b) = (OwnerToken::new(), OwnerToken::new());
    let first = room.take_ticket("k", a, Wakes::Named);
    let second = room.take_ticket("k", b, Wakes::Named);

    room.announce("k", Announcement::Next(b));

    assert!(woken(&second, DUE).await);
    assert!(!woken(&first, NOT_DUE).await, "the other ticket sleeps on");
}

#[tokio::test]
async fn a_head_without_a_place_in_the_queue_wakes_for_another_processs_ticket_to_take_its_own() {
    let room = WaitingRoom::in_process();
    let head = room.take_ticket("k", OwnerToken::new(), Wakes::Head);

    room.announce("k", Announcement::Next(OwnerToken::new()));

    assert!(woken(&head, DUE).await);
}

#[tokio::test]
async fn an_enqueued_head_sleeps_through_other_tickets_and_wakes_when_named() {
    let room = WaitingRoom::in_process();
    let token = OwnerToken::new();
    let head = room.take_ticket("k", token, Wakes::Head);
    head.enqueued();

    room.announce("k", Announcement::Next(OwnerToken::new()));
    assert!(!woken(&head, NOT_DUE).await, "another process's turn");

    room.announce("k", Announcement::Next(token));
    assert!(woken(&head, DUE).await);
}

#[tokio::test]
async fn a_waiter_that_leaves_stops_being_counted() {
    let room = WaitingRoom::in_process();
    let place = room.take_ticket("k", OwnerToken::new(), Wakes::Named);
    assert!(room.has_waiters("k"));

    drop(place);

    assert!(!room.has_waiters("k"));
}

#[tokio::test(start_paused = true)]
async fn a_name_is_forgotten_after_its_last_waiter_leaves_and_the_linger_passes() {
    let room = WaitingRoom::in_process();
    drop(room.take_ticket("k", OwnerToken::new(), Wakes::Named));
    assert_eq!(room.waiting_names(), 1);

    tokio::time::sleep(LINGER + Duration::from_millis(1)).await;

    assert_eq!(room.waiting_names(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_who_returns_within_the_linger_keeps_the_name() {
    let room = WaitingRoom::in_process();
    drop(room.take_ticket("k", OwnerToken::new(), Wakes::Named));
    tokio::time::sleep(LINGER / 2).await;
    let again = room.take_ticket("k", OwnerToken::new(), Wakes::Named);

    tokio::time::sleep(LINGER).await;

    assert_eq!(room.waiting_names(), 1);
    drop(again);
}

#[tokio::test(start_paused = true)]
async fn a_release_here_wakes_only_the_waiters_that_poll() {
    let room = WaitingRoom::in_process();
    let polling = room.take_ticket("k", OwnerToken::new(), Wakes::Polling);
    let named = room.take_ticket("k", OwnerToken::new(), Wakes::Named);
    let head = room.take_ticket("k", OwnerToken::new(), Wakes::Head);
    let elsewhere = room.take_ticket("j", OwnerToken::new(), Wakes::Polling);

    room.released_here("k");

    assert!(woken(&polling, DUE).await);
    assert!(
        !woken(&named, NOT_DUE).await,
        "it hears the store's announcement"
    );
    assert!(
        !woken(&head, NOT_DUE).await,
        "it hears the store's announcement"
    );
    assert!(!woken(&elsewhere, NOT_DUE).await, "another lock");
}
