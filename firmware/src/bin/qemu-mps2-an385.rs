//! The wirekit firmware on QEMU's `mps2-an385` (Cortex-M3 with a LAN9118 NIC).
//!
//! Boot it with `cargo xtask qemu` from the repository root, or by hand:
//! `qemu-system-arm -machine mps2-an385 -cpu cortex-m3 -display none -serial null -monitor none
//! -semihosting-config enable=on,target=native
//! -nic user,model=lan9118,hostfwd=tcp:127.0.0.1:7000-10.0.2.15:7000 -kernel <elf>`.
//! The guest is 10.0.2.15/24 behind QEMU's user-mode network (gateway 10.0.2.2); defmt frames
//! go to QEMU's stdout (decode with `defmt-print -e <elf>`).
//!
//! For test rigs, TCP port 7001 is a control port: the line `shutdown\n` ends QEMU with exit
//! status 0 (a panic ends it with 101, a HardFault with 102).
#![no_std]
#![no_main]

use defmt_semihosting as _;
use embassy_executor::Spawner;
use embassy_net::{Ipv4Address, Ipv4Cidr, Runner, Stack, StackResources, StaticConfigV4};
use static_cell::{ConstStaticCell, StaticCell};
use wirekit_firmware::lan9118::{self, Lan9118};
use wirekit_firmware::paced::Paced;
use wirekit_firmware::qemu_exit;
use wirekit_firmware::server::{self, SOCKETS, TcpBuffers};
use wirekit_firmware::systick_time;

/// The MPS2 FPGA images clock the Cortex-M3 at 25 MHz.
const CORE_HZ: u32 = 25_000_000;

#[embassy_executor::task]
async fn net_task(mut runner: Runner<'static, Paced<Lan9118>>) -> ! {
    runner.run().await
}

#[embassy_executor::task]
async fn nic_poll_task() -> ! {
    lan9118::poll_task_body().await
}

#[embassy_executor::task]
async fn control_task(stack: Stack<'static>) -> ! {
    qemu_exit::serve_control_port(stack, || {
        use wirekit_core::service::Counters;
        defmt::info!("counters: {}", server::COUNTERS.snapshot());
    })
    .await
}

#[embassy_executor::task(pool_size = SOCKETS)]
async fn connection_task(stack: Stack<'static>, id: usize, tcp: &'static mut TcpBuffers) -> ! {
    server::serve_socket(stack, id, tcp).await
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    defmt::info!("wirekit firmware on mps2-an385");
    let Some(core) = cortex_m::Peripherals::take() else {
        defmt::error!("core peripherals already taken");
        qemu_exit::exit(1);
    };
    // SAFETY: the MPS2 AN385 image maps CMSDK APB timer 0 at MPS2_TIMER0, clocked like the
    // core, and nothing else here uses it.
    let counter = unsafe { systick_time::CmsdkTimer::new(systick_time::MPS2_TIMER0) };
    systick_time::init_with_counter(core.SYST, CORE_HZ, counter, CORE_HZ);

    // SAFETY: the MPS2 AN385 image maps a LAN9118 (32-bit mode) at MPS2_BASE, and this driver
    // is its only user.
    let nic = match unsafe { Lan9118::new(lan9118::MPS2_BASE) } {
        Ok(nic) => nic,
        Err(e) => {
            defmt::error!("lan9118: {}", e);
            qemu_exit::exit(1);
        }
    };
    let mac = nic.mac_address();
    defmt::info!("lan9118 up, mac {=[u8]:02x}", mac);

    let config = embassy_net::Config::ipv4_static(StaticConfigV4 {
        address: Ipv4Cidr::new(Ipv4Address::new(10, 0, 2, 15), 24),
        gateway: Some(Ipv4Address::new(10, 0, 2, 2)),
        dns_servers: heapless::Vec::new(),
    });
    // The emulator has no entropy source; the seed only spreads TCP initial sequence numbers
    // and local ports, which QEMU's user network does not care about.
    let seed = u64::from_le_bytes([mac[0], mac[1], mac[2], mac[3], mac[4], mac[5], 0x77, 0x6b]);
    static RESOURCES: StaticCell<StackResources<{ SOCKETS + 1 }>> = StaticCell::new();
    let (stack, runner) = embassy_net::new(
        Paced::new(nic),
        config,
        RESOURCES.init(StackResources::new()),
        seed,
    );

    spawner.spawn(wirekit_firmware::spawned(net_task(runner), "net_task"));
    spawner.spawn(wirekit_firmware::spawned(nic_poll_task(), "nic_poll_task"));

    spawner.spawn(wirekit_firmware::spawned(
        control_task(stack),
        "control_task",
    ));

    server::init();
    static TCP: ConstStaticCell<[TcpBuffers; SOCKETS]> =
        ConstStaticCell::new([const { TcpBuffers::new() }; SOCKETS]);
    for (id, tcp) in TCP.take().iter_mut().enumerate() {
        spawner.spawn(wirekit_firmware::spawned(
            connection_task(stack, id, tcp),
            "connection_task",
        ));
    }
    stack.wait_config_up().await;
    defmt::info!("serving on 10.0.2.15:{=u16}", server::SERVICE_PORT);
}
