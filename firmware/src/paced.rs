//! A network driver that hands the stack at most [`FRAMES_PER_POLL`] received frames per
//! poll.
//!
//! smoltcp's ingress loop takes frames until the driver has none: under a flood that keeps
//! the receive ring full (any host on the LAN can send to the board's address; minimum-size
//! frames at 100 Mbit/s come faster than the core handles them), one poll of the network task
//! would never end, and the tasks sharing the executor (the sessions, the watchdog's feeder)
//! would never run: the watchdog would reset the board, and go on resetting it while the
//! flood lasts. Past the limit this wrapper ends the poll and wakes the task again, so the
//! executor runs the others before the next batch (a receive budget, as Linux's NAPI has).

use core::task::Context;

use embassy_net_driver::{Capabilities, Driver, HardwareAddress, LinkState};

/// Frames taken per poll of the network stack before the executor's other tasks get a turn:
/// a few, so a flood costs the others a few frames' handling at a time.
pub const FRAMES_PER_POLL: u8 = 8;

/// `D`, with its received frames paced (see the module docs).
pub struct Paced<D> {
    inner: D,
    /// Frames taken in this poll.
    taken: u8,
}

impl<D> Paced<D> {
    /// Wraps `inner`.
    pub const fn new(inner: D) -> Self {
        Paced { inner, taken: 0 }
    }
}

impl<D: Driver> Driver for Paced<D> {
    type RxToken<'a>
        = D::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = D::TxToken<'a>
    where
        Self: 'a;

    fn receive(&mut self, cx: &mut Context) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        if self.taken >= FRAMES_PER_POLL {
            // This poll ends here; the stack's task is polled again after the others.
            self.taken = 0;
            cx.waker().wake_by_ref();
            return None;
        }
        let frame = self.inner.receive(cx);
        self.taken = if frame.is_some() { self.taken + 1 } else { 0 };
        frame
    }

    fn transmit(&mut self, cx: &mut Context) -> Option<Self::TxToken<'_>> {
        self.inner.transmit(cx)
    }

    fn link_state(&mut self, cx: &mut Context) -> LinkState {
        self.inner.link_state(cx)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn hardware_address(&self) -> HardwareAddress {
        self.inner.hardware_address()
    }
}
