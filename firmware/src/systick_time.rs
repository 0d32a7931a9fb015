//! An embassy-time driver on the Cortex-M SysTick timer, for boards without a vendor HAL time
//! driver (QEMU's MPS2 machines).
//!
//! SysTick interrupts at [`embassy_time_driver::TICK_HZ`] (1 kHz, set by the `tick-hz-1_000`
//! feature) and extends its 24-bit counter in software to the 64-bit tick count embassy-time
//! wants. Each interrupt also fires the timers that are due, from an
//! [`embassy_time_queue_utils::Queue`].

use core::cell::{Cell, RefCell};
use core::task::Waker;

use cortex_m::peripheral::SYST;
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::exception;
use critical_section::Mutex;
use embassy_time_driver::{Driver, TICK_HZ};
use embassy_time_queue_utils::Queue;

struct SysTickDriver {
    /// Ticks since [`init`].
    ticks: Mutex<Cell<u64>>,
    /// The earliest tick at which a timer in `queue` is due (`u64::MAX`: none).
    next_alarm: Mutex<Cell<u64>>,
    queue: Mutex<RefCell<Queue>>,
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    ticks: Mutex::new(Cell::new(0)),
    next_alarm: Mutex::new(Cell::new(u64::MAX)),
    queue: Mutex::new(RefCell::new(Queue::new())),
});

impl Driver for SysTickDriver {
    fn now(&self) -> u64 {
        critical_section::with(|cs| self.ticks.borrow(cs).get())
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut queue = self.queue.borrow_ref_mut(cs);
            if queue.schedule_wake(at, waker) {
                let now = self.ticks.borrow(cs).get();
                self.next_alarm.borrow(cs).set(queue.next_expiration(now));
            }
        });
    }
}

impl SysTickDriver {
    fn on_tick(&self) {
        critical_section::with(|cs| {
            let ticks = self.ticks.borrow(cs);
            let now = ticks.get() + 1;
            ticks.set(now);
            let next = self.next_alarm.borrow(cs);
            if now >= next.get() {
                next.set(self.queue.borrow_ref_mut(cs).next_expiration(now));
            }
        });
    }
}

/// Starts SysTick on the core clock, `core_hz` cycles a second, interrupting at `TICK_HZ`.
pub fn init(mut syst: SYST, core_hz: u32) {
    let reload = core_hz / TICK_HZ as u32 - 1;
    syst.disable_counter();
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(reload);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

#[exception]
fn SysTick() {
    DRIVER.on_tick();
}
