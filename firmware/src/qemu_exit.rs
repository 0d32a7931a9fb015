//! Ending a QEMU run with a status, through semihosting; and the fault handlers that use it, so a
//! panic or a fault ends the emulator with a failure instead of hanging it.

use cortex_m_rt::{ExceptionFrame, exception};

/// Exit status after a panic.
pub const PANIC_STATUS: i32 = 101;
/// Exit status after a HardFault.
pub const FAULT_STATUS: i32 = 102;

/// Ends the emulator with `status` (0: success).
pub fn exit(status: i32) -> ! {
    semihosting::process::exit(status)
}

#[defmt::panic_handler]
fn defmt_panic() -> ! {
    exit(PANIC_STATUS)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    // The location only: formatting the message would link core::fmt (several KiB of flash).
    match info.location() {
        Some(at) => defmt::error!("panic at {=str}:{=u32}", at.file(), at.line()),
        None => defmt::error!("panic"),
    }
    exit(PANIC_STATUS)
}

#[exception]
unsafe fn HardFault(frame: &ExceptionFrame) -> ! {
    defmt::error!(
        "HardFault at pc {=u32:#x} (lr {=u32:#x})",
        frame.pc(),
        frame.lr()
    );
    exit(FAULT_STATUS)
}

/// The QEMU board's shutdown control port (test rigs only: real boards have none).
pub const CONTROL_PORT: u16 = 7001;
/// The line that shuts the emulator down with status 0.
pub const SHUTDOWN_COMMAND: &[u8] = b"shutdown\n";
/// The line that panics (so a test rig can check a panic ends QEMU with [`PANIC_STATUS`]).
pub const PANIC_COMMAND: &[u8] = b"panic\n";
/// The line that executes an undefined instruction (UsageFault escalated to HardFault, so a
/// test rig can check a fault ends QEMU with [`FAULT_STATUS`]).
pub const FAULT_COMMAND: &[u8] = b"fault\n";

/// Serves [`CONTROL_PORT`] forever. A client sends one line: [`SHUTDOWN_COMMAND`] ends the
/// emulator with status 0 (after `before_exit` has run, e.g. to log counters);
/// [`PANIC_COMMAND`] and [`FAULT_COMMAND`] exercise the failure exits. Anything else is logged
/// and the connection closed.
pub async fn serve_control_port(stack: embassy_net::Stack<'_>, before_exit: impl Fn()) -> ! {
    let mut rx = [0u8; 64];
    let mut tx = [0u8; 64];
    loop {
        let mut socket = embassy_net::tcp::TcpSocket::new(stack, &mut rx, &mut tx);
        socket.set_timeout(Some(embassy_time::Duration::from_secs(5)));
        if socket.accept(CONTROL_PORT).await.is_err() {
            continue;
        }
        let mut line = [0u8; 16];
        let mut got = 0;
        while got < line.len() && !line[..got].ends_with(b"\n") {
            match socket.read(&mut line[got..]).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        let line = &line[..got];
        if line == SHUTDOWN_COMMAND {
            before_exit();
            defmt::info!("shutdown requested on the control port: exiting with status 0");
            exit(0);
        } else if line == PANIC_COMMAND {
            defmt::panic!("panic requested on the control port");
        } else if line == FAULT_COMMAND {
            defmt::warn!("fault requested on the control port");
            cortex_m::asm::udf();
        }
        // Under the connections' log limit: a peer that reaches this port (forwarded by a
        // test rig) can open connections as fast as it likes.
        if crate::server::log_allowed() {
            defmt::warn!("control port: unknown command {=[u8]:a}", line);
        }
        socket.abort();
        // Bounded, as the server's resets are: a reset that cannot go out must not stall the
        // control port.
        let _ = embassy_time::with_timeout(crate::server::RESET_FLUSH, socket.flush()).await;
    }
}
