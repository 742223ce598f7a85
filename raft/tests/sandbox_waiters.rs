//! `palisade_raft::waiters`: a request handler waiting on one sandbox is woken
//! by changes to that sandbox (and by changes not tied to any), not by others.

use std::sync::Arc;
use std::time::Duration;

use palisade_raft::waiters::SandboxWaiters;

#[tokio::test]
async fn only_the_touched_sandboxes_waiters_wake() {
    let waiters = Arc::new(SandboxWaiters::default());
    let a = waiters.register("a");
    let b = waiters.register("b");
    {
        let a_woken = a.sandbox.notified();
        let b_woken = b.sandbox.notified();
        tokio::pin!(a_woken, b_woken);
        a_woken.as_mut().enable();
        b_woken.as_mut().enable();
        waiters.wake(["a", "c"]);
        tokio::time::timeout(Duration::from_secs(5), a_woken)
            .await
            .expect("the waiter of a is woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), b_woken.as_mut())
                .await
                .is_err(),
            "the waiter of b is not"
        );
        waiters.wake_everyone();
        let everyone = b.everyone.notified();
        tokio::pin!(everyone);
        everyone.as_mut().enable();
        waiters.wake_everyone();
        tokio::time::timeout(Duration::from_secs(5), everyone)
            .await
            .expect("wake_everyone wakes b");
    }
    assert_eq!(waiters.registered(), 2);
    drop(a);
    let again = waiters.register("b");
    assert_eq!(waiters.registered(), 1);
    drop(b);
    assert_eq!(waiters.registered(), 1, "b still has a waiter");
    drop(again);
    assert_eq!(waiters.registered(), 0);
}
