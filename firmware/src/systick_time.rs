//! An embassy-time driver on the Cortex-M SysTick timer, for boards without a vendor HAL time
//! driver (QEMU's MPS2 machines).
//!
//! SysTick interrupts at [`embassy_time_driver::TICK_HZ`] (1 kHz, set by the `tick-hz-1_000`
//! feature); each interrupt fires the timers that are due, from an
//! [`embassy_time_queue_utils::Queue`].
//!
//! The time itself comes from one of two sources. By default it is the count of SysTick
//! interrupts, which is exact on hardware but loses time under an emulator: when the host
//! deschedules QEMU's vCPU, SysTick periods that expire before the guest runs again are taken
//! as one pending interrupt, and a loaded host made a 5 s timeout last 15-21 s. With
//! [`init_with_counter`] the time is read from a free-running 32-bit down counter instead
//! (the CMSDK APB timer of the MPS2 images, [`CmsdkTimer`]), extended to 64 bits in software:
//! its value follows the emulator's virtual clock, which keeps pace with the host's, however
//! late the interrupts are handled. SysTick then only wakes the executor to fire timers.

use core::cell::{Cell, RefCell};
use core::task::Waker;

use cortex_m::peripheral::SYST;
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::exception;
use critical_section::Mutex;
use embassy_time_driver::{Driver, TICK_HZ};
use embassy_time_queue_utils::Queue;

struct SysTickDriver {
    /// Ticks since [`init`] (SysTick interrupts counted), when no counter is installed.
    ticks: Mutex<Cell<u64>>,
    /// The free-running counter, when [`init_with_counter`] installed one.
    counter: Mutex<Cell<Option<Extended>>>,
    /// The earliest tick at which a timer in `queue` is due (`u64::MAX`: none).
    next_alarm: Mutex<Cell<u64>>,
    queue: Mutex<RefCell<Queue>>,
}

embassy_time_driver::time_driver_impl!(static DRIVER: SysTickDriver = SysTickDriver {
    ticks: Mutex::new(Cell::new(0)),
    counter: Mutex::new(Cell::new(None)),
    next_alarm: Mutex::new(Cell::new(u64::MAX)),
    queue: Mutex::new(RefCell::new(Queue::new())),
});

impl Driver for SysTickDriver {
    fn now(&self) -> u64 {
        critical_section::with(|cs| self.now_in(cs))
    }

    fn schedule_wake(&self, at: u64, waker: &Waker) {
        critical_section::with(|cs| {
            let mut queue = self.queue.borrow_ref_mut(cs);
            if queue.schedule_wake(at, waker) {
                let now = self.now_in(cs);
                self.next_alarm.borrow(cs).set(queue.next_expiration(now));
            }
        });
    }
}

impl SysTickDriver {
    /// The current tick, from the counter when one is installed.
    fn now_in(&self, cs: critical_section::CriticalSection<'_>) -> u64 {
        let cell = self.counter.borrow(cs);
        match cell.get() {
            Some(mut counter) => {
                let now = counter.read();
                cell.set(Some(counter));
                now
            }
            None => self.ticks.borrow(cs).get(),
        }
    }

    fn on_tick(&self) {
        critical_section::with(|cs| {
            let ticks = self.ticks.borrow(cs);
            ticks.set(ticks.get() + 1);
            // Reading the counter here, once a millisecond, also keeps its 64-bit extension
            // exact: it only has to be read once per wrap (171 s at 25 MHz).
            let now = self.now_in(cs);
            let next = self.next_alarm.borrow(cs);
            if now >= next.get() {
                next.set(self.queue.borrow_ref_mut(cs).next_expiration(now));
            }
        });
    }
}

/// Starts SysTick on the core clock, `core_hz` cycles a second, interrupting at `TICK_HZ`; the
/// time is the count of its interrupts.
pub fn init(syst: SYST, core_hz: u32) {
    start_systick(syst, core_hz);
}

/// Starts SysTick as [`init`] does, and takes the time from `counter`, started here as a
/// free-running down counter of `counter_hz` cycles a second (a multiple of `TICK_HZ`).
pub fn init_with_counter(syst: SYST, core_hz: u32, counter: CmsdkTimer, counter_hz: u32) {
    counter.start_free_running();
    let extended = Extended {
        timer: counter,
        cycles_per_tick: counter_hz / TICK_HZ as u32,
        last: 0,
        high: 0,
    };
    critical_section::with(|cs| DRIVER.counter.borrow(cs).set(Some(extended)));
    start_systick(syst, core_hz);
}

/// A free-running counter read as 64-bit ticks: the elapsed count of a 32-bit down counter
/// and the number of times it wrapped.
#[derive(Clone, Copy)]
struct Extended {
    timer: CmsdkTimer,
    cycles_per_tick: u32,
    /// The elapsed low 32 bits at the last read.
    last: u32,
    /// Wraps seen.
    high: u32,
}

impl Extended {
    fn read(&mut self) -> u64 {
        // The counter runs down from `u32::MAX` and reloads it after 0: elapsed = !value.
        let elapsed = !self.timer.value();
        if elapsed < self.last {
            self.high = self.high.wrapping_add(1);
        }
        self.last = elapsed;
        ((u64::from(self.high) << 32) | u64::from(elapsed)) / u64::from(self.cycles_per_tick)
    }
}

/// An ARM CMSDK APB timer (a 32-bit down counter with reload), as the MPS2 FPGA images and
/// QEMU's `mps2-an385` map at `0x4000_0000` (timer 0) and `0x4000_1000` (timer 1), clocked at
/// 25 MHz.
#[derive(Clone, Copy)]
pub struct CmsdkTimer {
    base: usize,
}

/// Timer 0 of the MPS2 AN385 image.
pub const MPS2_TIMER0: usize = 0x4000_0000;

impl CmsdkTimer {
    const CTRL: usize = 0x00;
    const VALUE: usize = 0x04;
    const RELOAD: usize = 0x08;
    /// CTRL bit 0: count.
    const ENABLE: u32 = 1;

    /// The timer at `base`.
    ///
    /// # Safety
    ///
    /// `base` must be the MMIO window of a CMSDK APB timer that nothing else uses.
    pub const unsafe fn new(base: usize) -> Self {
        CmsdkTimer { base }
    }

    fn read(self, offset: usize) -> u32 {
        // SAFETY: `base` is a CMSDK timer's MMIO window (`new`'s contract) and `offset` one of
        // its word-aligned registers.
        unsafe { core::ptr::read_volatile((self.base + offset) as *const u32) }
    }

    fn write(self, offset: usize, value: u32) {
        // SAFETY: as for `read`.
        unsafe { core::ptr::write_volatile((self.base + offset) as *mut u32, value) }
    }

    /// Counts down from `u32::MAX`, reloading it after 0, with its interrupt off.
    fn start_free_running(self) {
        self.write(Self::CTRL, 0);
        self.write(Self::RELOAD, u32::MAX);
        self.write(Self::VALUE, u32::MAX);
        self.write(Self::CTRL, Self::ENABLE);
    }

    fn value(self) -> u32 {
        self.read(Self::VALUE)
    }
}

fn start_systick(mut syst: SYST, core_hz: u32) {
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
