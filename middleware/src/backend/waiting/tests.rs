//! The waiting room's lines, tickets, announcements and lingering subscriptions.

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
async fn the_first_waiter_is_head_and_hands_over_in_arrival_order() {
    let room = WaitingRoom::in_process();
    let first = room.join_line("k", OwnerToken::new());
    let second = room.join_line("k", OwnerToken::new());
    let third = room.join_line("k", OwnerToken::new());
    first.turn().await;
    let second_turn = tokio::spawn(async move {
        second.turn().await;
        second
    });
    tokio::task::yield_now().await;
    assert!(!second_turn.is_finished());

    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(1), second_turn)
        .await
        .unwrap()
        .unwrap();

    assert!(!room.is_head("k", 2), "the third waits behind the second");
    drop(second);
    tokio::time::timeout(Duration::from_secs(1), third.turn())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_lock_handed_to_a_ticket_is_known_to_that_waiter_only_and_once() {
    let room = WaitingRoom::in_process();
    let (head_token, other_token) = (OwnerToken::new(), OwnerToken::new());
    let head = room.join_line("k", head_token);
    let other = room.take_ticket("k", other_token);
    head.turn().await;
    head.enqueued();

    room.announce(
        "k",
        Announcement::Handed {
            to: head_token,
            fence: Some(FencingToken::new(7)),
        },
    );

    assert!(woken(&head, DUE).await);
    assert_eq!(other.handed(other_token), None);
    assert_eq!(
        head.handed(head_token),
        Some((Some(FencingToken::new(7)), None)),
        "handed by another process: when is unknown"
    );
    assert_eq!(head.handed(head_token), None, "told once");
}

#[tokio::test]
async fn a_waiter_that_leaves_the_middle_of_the_line_does_not_disturb_it() {
    let room = WaitingRoom::in_process();
    let head = room.join_line("k", OwnerToken::new());
    let middle = room.join_line("k", OwnerToken::new());
    let last = room.join_line("k", OwnerToken::new());

    drop(middle);
    drop(head);

    tokio::time::timeout(Duration::from_secs(1), last.turn())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_announcement_before_the_wait_is_not_lost() {
    let room = WaitingRoom::in_process();
    let place = room.join_line("k", OwnerToken::new());

    room.announce("k", Announcement::Free);

    assert!(woken(&place, DUE).await);
}

#[tokio::test]
async fn fair_announcements_wake_only_the_named_ticket() {
    let room = WaitingRoom::in_process();
    let (a, b) = (OwnerToken::new(), OwnerToken::new());
    let first = room.take_ticket("k", a);
    let second = room.take_ticket("k", b);

    room.announce("k", Announcement::Next(b));

    assert!(woken(&second, DUE).await);
    assert!(!woken(&first, NOT_DUE).await, "the other ticket sleeps on");
}

#[tokio::test]
async fn a_head_without_a_ticket_wakes_for_another_processs_ticket_to_take_its_own() {
    let room = WaitingRoom::in_process();
    let head = room.join_line("k", OwnerToken::new());

    room.announce("k", Announcement::Next(OwnerToken::new()));

    assert!(woken(&head, DUE).await);
}

#[tokio::test]
async fn an_enqueued_head_sleeps_through_other_tickets_and_wakes_when_named() {
    let room = WaitingRoom::in_process();
    let token = OwnerToken::new();
    let head = room.join_line("k", token);
    head.turn().await;
    head.enqueued();

    room.announce("k", Announcement::Next(OwnerToken::new()));
    assert!(!woken(&head, NOT_DUE).await, "another process's turn");

    room.announce("k", Announcement::Next(token));
    assert!(woken(&head, DUE).await);
}

#[tokio::test]
async fn the_next_head_holds_no_ticket_until_it_asks() {
    let room = WaitingRoom::in_process();
    let first = room.join_line("k", OwnerToken::new());
    let second = room.join_line("k", OwnerToken::new());
    first.turn().await;
    first.enqueued();

    drop(first);
    second.turn().await;
    room.announce("k", Announcement::Next(OwnerToken::new()));

    assert!(woken(&second, DUE).await);
}

#[tokio::test(start_paused = true)]
async fn a_name_is_forgotten_after_its_last_waiter_leaves_and_the_linger_passes() {
    let room = WaitingRoom::in_process();
    drop(room.join_line("k", OwnerToken::new()));
    assert_eq!(room.waiting_names(), 1);

    tokio::time::sleep(LINGER + Duration::from_millis(1)).await;

    assert_eq!(room.waiting_names(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_who_returns_within_the_linger_keeps_the_name() {
    let room = WaitingRoom::in_process();
    drop(room.join_line("k", OwnerToken::new()));
    tokio::time::sleep(LINGER / 2).await;
    let again = room.join_line("k", OwnerToken::new());

    tokio::time::sleep(LINGER).await;

    assert_eq!(room.waiting_names(), 1);
    drop(again);
}

const LEASE: Duration = Duration::from_secs(1);

/// The terms on which `token` asks: a lease of [`LEASE`], a ticket of twice that.
fn terms(token: OwnerToken) -> ReadyHead {
    ReadyHead {
        token,
        lease: LEASE,
        ticket_ttl: 2 * LEASE,
    }
}

/// Two waiters for `k`: `holder`, which took the lock when it asked as head, and `next`, which
/// heads the line after it and has asked; with what `next`'s ask answered.
async fn held_in_line(
    room: &Arc<WaitingRoom>,
    holder: OwnerToken,
    next: OwnerToken,
) -> (Place, Option<Duration>) {
    let holding = room.join_line("k", holder);
    let head = room.join_line("k", next);
    holding.turn().await;
    assert_eq!(
        room.head_asks("k", terms(holder)),
        None,
        "nobody here holds it"
    );
    room.head_took("k", holder, Instant::now());
    drop(holding);
    head.turn().await;
    let local_left = room.head_asks("k", terms(next));
    (head, local_left)
}

#[tokio::test]
async fn a_release_in_process_hands_the_lock_to_the_ready_head_and_tells_it_when() {
    let room = WaitingRoom::in_process();
    let (holder, next) = (OwnerToken::new(), OwnerToken::new());
    let (head, left) = held_in_line(&room, holder, next).await;
    assert!(left.is_some(), "the holder's release will hand it over");

    let release = room.begin_release("k", holder);
    assert_eq!(release.head(), Some(terms(next)));
    assert!(
        room.head_asks("k", terms(next)).is_some(),
        "the release wakes it"
    );
    let sent = release.sent;
    assert_eq!(
        release.finish(Some((next, Some(FencingToken::new(9))))),
        None
    );

    assert!(woken(&head, DUE).await);
    let handed = (Some(FencingToken::new(9)), Some(sent));
    assert_eq!(head.handed(next), Some(handed));
}

#[tokio::test]
async fn a_release_that_hands_the_lock_elsewhere_or_fails_wakes_the_head_to_ask() {
    let room = WaitingRoom::in_process();
    let (holder, next) = (OwnerToken::new(), OwnerToken::new());
    let (head, _) = held_in_line(&room, holder, next).await;

    drop(room.begin_release("k", holder));

    assert!(woken(&head, DUE).await);
    assert_eq!(head.handed(next), None);
    assert_eq!(
        room.head_asks("k", terms(next)),
        None,
        "nobody of this line holds it any more"
    );
}

#[tokio::test]
async fn a_lock_handed_to_a_head_that_left_is_given_back_to_the_releaser_to_pass_on() {
    let room = WaitingRoom::in_process();
    let (holder, gone) = (OwnerToken::new(), OwnerToken::new());
    let head = room.join_line("k", gone);
    let _behind = room.join_line("k", OwnerToken::new());
    head.turn().await;
    room.head_asks("k", terms(gone));
    let release = room.begin_release("k", holder);
    assert_eq!(release.head(), Some(terms(gone)));

    drop(head);

    assert_eq!(release.finish(Some((gone, None))), Some(gone));
}

#[tokio::test(start_paused = true)]
async fn the_head_asks_the_store_once_the_local_holders_lease_may_have_ended() {
    let room = WaitingRoom::in_process();
    let (holder, next) = (OwnerToken::new(), OwnerToken::new());
    let (_head, left) = held_in_line(&room, holder, next).await;
    let left = left.expect("held in this process");
    assert!(left < LEASE, "a drift margin short of the lease");

    tokio::time::sleep(left).await;

    assert_eq!(room.head_asks("k", terms(next)), None);
}
