//! A polled embassy-net driver for the SMSC LAN9118 Ethernet controller, as QEMU emulates it on
//! the `mps2-an385` machine (at `0x4020_0000`).
//!
//! Only the registers QEMU implements are touched: it aborts the whole emulator on any other.
//! Frames move through the controller's FIFOs one 32-bit word at a time, bytes in little-endian
//! order. The driver is polled (QEMU does raise the RX status FIFO level interrupt, on the
//! AN385's IRQ 13, but an interrupt-driven driver costs flash this image does not have): when
//! nothing is pending it parks the network task's waker in [`POLL_WAKER`], and
//! [`poll_task_body`] wakes it on a short period (1 ms: at most that much receive latency).

use core::task::Context;

use embassy_net_driver::{Capabilities, HardwareAddress, LinkState};
use embassy_sync::waitqueue::AtomicWaker;
use embassy_time::{Duration, Ticker};
use wirekit_core::limit::{LogDecision, LogLimit};

/// Where the MPS2 FPGA images map the controller.
pub const MPS2_BASE: usize = 0x4020_0000;

/// Largest Ethernet frame handled, without the FCS (1500-byte IP MTU + 14-byte header).
pub const MTU: usize = 1514;

/// How often the receive path is polled while idle.
pub const POLL_PERIOD: Duration = Duration::from_millis(1);

/// The network task's waker while it waits for a frame or TX FIFO room.
pub static POLL_WAKER: AtomicWaker = AtomicWaker::new();

/// Wakes the network task every [`POLL_PERIOD`]; run it in its own task, forever.
pub async fn poll_task_body() -> ! {
    let mut ticker = Ticker::every(POLL_PERIOD);
    loop {
        ticker.next().await;
        POLL_WAKER.wake();
    }
}

/// Register offsets (system control and status registers, "CSRs").
mod reg {
    pub const RX_DATA_FIFO: usize = 0x00;
    pub const TX_DATA_FIFO: usize = 0x20;
    pub const RX_STATUS_FIFO: usize = 0x40;
    pub const TX_STATUS_FIFO: usize = 0x48;
    pub const ID_REV: usize = 0x50;
    pub const INT_EN: usize = 0x5C;
    pub const BYTE_TEST: usize = 0x64;
    pub const RX_CFG: usize = 0x6C;
    pub const TX_CFG: usize = 0x70;
    pub const HW_CFG: usize = 0x74;
    pub const RX_FIFO_INF: usize = 0x7C;
    pub const TX_FIFO_INF: usize = 0x80;
    pub const MAC_CSR_CMD: usize = 0xA4;
    pub const MAC_CSR_DATA: usize = 0xA8;
}

/// MAC registers, reached indirectly through `MAC_CSR_CMD` / `MAC_CSR_DATA`.
mod mac {
    pub const CR: u32 = 1;
    pub const ADDRH: u32 = 2;
    pub const ADDRL: u32 = 3;
    pub const MII_ACC: u32 = 6;
    pub const MII_DATA: u32 = 7;

    pub const CR_TXEN: u32 = 1 << 3;
    pub const CR_RXEN: u32 = 1 << 2;
    pub const CR_FDPX: u32 = 1 << 20;
}

const BYTE_TEST_VALUE: u32 = 0x8765_4321;
const HW_CFG_SRST: u32 = 1;
const TX_CFG_TX_ON: u32 = 1 << 1;
const MAC_CSR_BUSY: u32 = 1 << 31;
const MAC_CSR_READ: u32 = 1 << 30;
/// TX command A: first segment, last segment.
const TX_CMD_A_FIRST: u32 = 1 << 13;
const TX_CMD_A_LAST: u32 = 1 << 12;
/// The internal PHY's MII address, and the link bit of its basic status register.
const PHY_ADDR: u32 = 1;
const PHY_BSR: u32 = 1;
const PHY_BSR_LINK: u32 = 1 << 2;
/// Status bits of an RX status word that mark a frame as bad (error summary, length error).
const RX_STATUS_ERROR: u32 = (1 << 15) | (1 << 12);
/// Bound on busy-wait loops against the controller (each iteration is one register read).
const SPIN_LIMIT: u32 = 100_000;
/// The limit on "dropped a frame" lines: bursts of 5, then one every 2 s (a stream of bad
/// frames must not keep the network task writing logs). Every drop is counted in
/// [`Lan9118::dropped`], and each line says how many were not logged.
const DROP_LOGS: LogLimit = LogLimit::new(5, wirekit_core::time::Duration::from_secs(10));

/// Why the controller could not be brought up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, defmt::Format)]
pub enum InitError {
    /// BYTE_TEST did not read 0x87654321: no LAN9118 at this address, or a bus-width mismatch.
    NotFound(u32),
    /// The controller did not finish a soft reset or a MAC register access in time.
    Timeout,
}

/// Volatile access to the controller's register window.
#[derive(Clone, Copy)]
struct Regs {
    base: usize,
}

impl Regs {
    fn read(self, offset: usize) -> u32 {
        // SAFETY: `base` is the controller's MMIO window (see `Lan9118::new`'s contract) and every
        // offset used is one of the word-aligned registers in `reg`, all implemented by QEMU.
        unsafe { core::ptr::read_volatile((self.base + offset) as *const u32) }
    }

    fn write(self, offset: usize, value: u32) {
        // SAFETY: as for `read`.
        unsafe { core::ptr::write_volatile((self.base + offset) as *mut u32, value) }
    }

    fn mac_wait(self) -> Result<(), InitError> {
        for _ in 0..SPIN_LIMIT {
            if self.read(reg::MAC_CSR_CMD) & MAC_CSR_BUSY == 0 {
                return Ok(());
            }
        }
        Err(InitError::Timeout)
    }

    fn mac_read(self, index: u32) -> Result<u32, InitError> {
        self.mac_wait()?;
        self.write(reg::MAC_CSR_CMD, MAC_CSR_BUSY | MAC_CSR_READ | index);
        self.mac_wait()?;
        Ok(self.read(reg::MAC_CSR_DATA))
    }

    fn mac_write(self, index: u32, value: u32) -> Result<(), InitError> {
        self.mac_wait()?;
        self.write(reg::MAC_CSR_DATA, value);
        self.write(reg::MAC_CSR_CMD, MAC_CSR_BUSY | index);
        self.mac_wait()
    }

    fn phy_read(self, index: u32) -> Result<u32, InitError> {
        // MII_ACC: PHY address in 15:11, register in 10:6, bit 1 clear = read, bit 0 = busy.
        self.mac_write(mac::MII_ACC, (PHY_ADDR << 11) | (index << 6) | 1)?;
        for _ in 0..SPIN_LIMIT {
            if self.mac_read(mac::MII_ACC)? & 1 == 0 {
                return Ok(self.mac_read(mac::MII_DATA)? & 0xFFFF);
            }
        }
        Err(InitError::Timeout)
    }
}

/// The LAN9118 as an [`embassy_net_driver::Driver`], with one frame buffer each way.
pub struct Lan9118 {
    regs: Regs,
    mac: [u8; 6],
    rx: [u8; MTU],
    tx: [u8; MTU],
    /// Frames dropped because they were longer than [`MTU`] or flagged bad by the controller.
    dropped: u32,
    /// The limit on logging those drops.
    drop_logs: LogLimit,
}

impl Lan9118 {
    /// Resets the controller at `base`, reads the MAC address it loaded from its EEPROM and
    /// enables the transmitter and the receiver (frames addressed elsewhere are filtered).
    ///
    /// # Safety
    /// `base` must be the register window of a LAN9118 running in 32-bit mode, and nothing else
    /// may access it while the returned driver lives.
    pub unsafe fn new(base: usize) -> Result<Self, InitError> {
        let regs = Regs { base };
        let test = regs.read(reg::BYTE_TEST);
        if test != BYTE_TEST_VALUE {
            return Err(InitError::NotFound(test));
        }
        regs.write(reg::HW_CFG, HW_CFG_SRST);
        let mut reset_done = false;
        for _ in 0..SPIN_LIMIT {
            if regs.read(reg::HW_CFG) & HW_CFG_SRST == 0 {
                reset_done = true;
                break;
            }
        }
        if !reset_done {
            return Err(InitError::Timeout);
        }
        defmt::debug!("lan9118: id_rev {=u32:#x}", regs.read(reg::ID_REV));
        // No interrupts: the driver polls.
        regs.write(reg::INT_EN, 0);
        // RX: no offset, no end padding, so a frame is exactly ceil(len / 4) words.
        regs.write(reg::RX_CFG, 0);
        regs.write(reg::TX_CFG, TX_CFG_TX_ON);

        let low = regs.mac_read(mac::ADDRL)?.to_le_bytes();
        let high = regs.mac_read(mac::ADDRH)?.to_le_bytes();
        let mac = [low[0], low[1], low[2], low[3], high[0], high[1]];
        regs.mac_write(mac::CR, mac::CR_TXEN | mac::CR_RXEN | mac::CR_FDPX)?;
        Ok(Self {
            regs,
            mac,
            rx: [0; MTU],
            tx: [0; MTU],
            dropped: 0,
            drop_logs: DROP_LOGS,
        })
    }

    /// The MAC address the controller uses.
    pub fn mac_address(&self) -> [u8; 6] {
        self.mac
    }

    /// Frames dropped so far (too long, or flagged bad by the controller).
    pub fn dropped(&self) -> u32 {
        self.dropped
    }

    /// Pops one frame into `self.rx`, returning its length without the FCS; bad or oversized
    /// frames are drained and counted, and `None` means the RX FIFO holds no frame.
    fn pop_frame(&mut self) -> Option<usize> {
        loop {
            let pending = (self.regs.read(reg::RX_FIFO_INF) >> 16) & 0xFF;
            if pending == 0 {
                return None;
            }
            let status = self.regs.read(reg::RX_STATUS_FIFO);
            // Bits 29:16: the frame length including the 4-byte FCS.
            let with_fcs = ((status >> 16) & 0x3FFF) as usize;
            let words = with_fcs.div_ceil(4);
            let Some(len) = with_fcs
                .checked_sub(4)
                .filter(|&l| l <= MTU && status & RX_STATUS_ERROR == 0)
            else {
                for _ in 0..words {
                    self.regs.read(reg::RX_DATA_FIFO);
                }
                self.dropped = self.dropped.wrapping_add(1);
                if let LogDecision::Log { suppressed } = self.drop_logs.check(crate::now()) {
                    defmt::warn!(
                        "lan9118: dropped a frame (status {=u32:#x}; {=u32} drops not logged since the last line)",
                        status,
                        suppressed
                    );
                }
                continue;
            };
            for i in 0..words {
                let word = self.regs.read(reg::RX_DATA_FIFO).to_le_bytes();
                let start = i * 4;
                // The last word carries FCS bytes past `len`: keep only the frame's.
                let keep = len.saturating_sub(start).min(4);
                if keep > 0 {
                    self.rx[start..start + keep].copy_from_slice(&word[..keep]);
                }
            }
            return Some(len);
        }
    }

    /// Whether the TX data FIFO has room for a full frame plus its two command words.
    fn tx_room(&self) -> bool {
        // Drain TX status words so the status FIFO never fills up (QEMU stops recording then).
        while (self.regs.read(reg::TX_FIFO_INF) >> 16) & 0xFF != 0 {
            self.regs.read(reg::TX_STATUS_FIFO);
        }
        (self.regs.read(reg::TX_FIFO_INF) & 0xFFFF) as usize >= MTU + 8
    }
}

/// A received frame, borrowed from the driver's RX buffer.
pub struct RxToken<'a> {
    frame: &'a mut [u8],
}

impl embassy_net_driver::RxToken for RxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, f: F) -> R {
        f(self.frame)
    }
}

/// Room for one frame to send.
pub struct TxToken<'a> {
    regs: Regs,
    buf: &'a mut [u8; MTU],
}

impl embassy_net_driver::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        // smoltcp never asks for more than the MTU it was given; clamp rather than trust it.
        let len = len.min(MTU);
        let frame = &mut self.buf[..len];
        let result = f(frame);
        let regs = self.regs;
        regs.write(
            reg::TX_DATA_FIFO,
            TX_CMD_A_FIRST | TX_CMD_A_LAST | len as u32,
        );
        // Command B: packet tag (unused) in 31:16, total packet length in 10:0.
        regs.write(reg::TX_DATA_FIFO, len as u32);
        for chunk in frame.chunks(4) {
            let mut word = [0u8; 4];
            word[..chunk.len()].copy_from_slice(chunk);
            regs.write(reg::TX_DATA_FIFO, u32::from_le_bytes(word));
        }
        result
    }
}

impl embassy_net_driver::Driver for Lan9118 {
    type RxToken<'a> = RxToken<'a>;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, cx: &mut Context) -> Option<(RxToken<'_>, TxToken<'_>)> {
        if !self.tx_room() {
            POLL_WAKER.register(cx.waker());
            return None;
        }
        let Some(len) = self.pop_frame() else {
            POLL_WAKER.register(cx.waker());
            return None;
        };
        let regs = self.regs;
        Some((
            RxToken {
                frame: &mut self.rx[..len],
            },
            TxToken {
                regs,
                buf: &mut self.tx,
            },
        ))
    }

    fn transmit(&mut self, cx: &mut Context) -> Option<TxToken<'_>> {
        if !self.tx_room() {
            POLL_WAKER.register(cx.waker());
            return None;
        }
        Some(TxToken {
            regs: self.regs,
            buf: &mut self.tx,
        })
    }

    fn link_state(&mut self, cx: &mut Context) -> LinkState {
        match self.regs.phy_read(PHY_BSR) {
            Ok(bsr) if bsr & PHY_BSR_LINK != 0 => LinkState::Up,
            _ => {
                POLL_WAKER.register(cx.waker());
                LinkState::Down
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::default();
        caps.max_transmission_unit = MTU;
        caps.max_burst_size = Some(1);
        caps
    }

    fn hardware_address(&self) -> HardwareAddress {
        HardwareAddress::Ethernet(self.mac)
    }
}
