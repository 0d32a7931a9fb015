//! The wirekit firmware on an ST Nucleo-F429ZI (STM32F429ZI, LAN8742A PHY over RMII).
//!
//! Flash and watch its defmt logs with `cargo nucleo` in `firmware/` (probe-rs through the
//! on-board ST-LINK). The board asks for an IPv4 address by DHCP and serves the wirekit service
//! on TCP port 7000; its address is in the log (`network up: <ip>`).
//!
//! The independent watchdog resets a board whose executor stops for [`WATCHDOG_US`]: a panic
//! or a fault (which halt it, waiting for a probe) ends in a reset, not in a board nobody can
//! reach until someone presses its button.
#![no_std]
#![no_main]

use embassy_executor::Spawner;
use embassy_net::{Runner, Stack, StackResources};
use embassy_stm32::eth::{Ethernet, GenericPhy, PacketQueue, Sma};
use embassy_stm32::peripherals::{ETH, ETH_SMA, IWDG, RNG};
use embassy_stm32::rng::Rng;
use embassy_stm32::time::Hertz;
use embassy_stm32::wdg::IndependentWatchdog;
use embassy_stm32::{bind_interrupts, eth, rng};
use static_cell::{ConstStaticCell, StaticCell};
use wirekit_firmware::paced::Paced;
use wirekit_firmware::server::{self, SOCKETS, TcpBuffers};
use {defmt_rtt as _, panic_probe as _};

bind_interrupts!(struct Irqs {
    ETH => eth::InterruptHandler;
    HASH_RNG => rng::InterruptHandler<RNG>;
});

type Device = Ethernet<'static, ETH, GenericPhy<Sma<'static, ETH_SMA>>>;

#[embassy_executor::task]
async fn net_task(mut runner: Runner<'static, Paced<Device>>) -> ! {
    runner.run().await
}

/// The watchdog's timeout: far past the longest the executor is busy in one poll (one key
/// derivation, about a quarter of a second on this chip: a session's call ends after each and
/// the driver yields), well within what an operator waits.
const WATCHDOG_US: u32 = 8_000_000;

/// Pets the watchdog every second, for as long as the executor runs its tasks.
#[embassy_executor::task]
async fn watchdog_task(mut watchdog: IndependentWatchdog<'static, IWDG>) -> ! {
    watchdog.unleash();
    loop {
        watchdog.pet();
        embassy_time::Timer::after_secs(1).await;
    }
}

#[embassy_executor::task(pool_size = SOCKETS)]
async fn connection_task(stack: Stack<'static>, id: usize, tcp: &'static mut TcpBuffers) -> ! {
    server::serve_socket(stack, id, tcp).await
}

/// 168 MHz from the ST-LINK's 8 MHz clock output, with the 48 MHz PLL output the RNG needs.
fn clocks() -> embassy_stm32::Config {
    use embassy_stm32::rcc::*;
    let mut config = embassy_stm32::Config::default();
    config.rcc.hse = Some(Hse {
        freq: Hertz(8_000_000),
        mode: HseMode::Bypass,
    });
    config.rcc.pll_src = PllSource::HSE;
    config.rcc.pll = Some(Pll {
        prediv: PllPreDiv::DIV4,
        mul: PllMul::MUL168,
        divp: Some(PllPDiv::DIV2),
        divq: Some(PllQDiv::DIV7),
        divr: None,
    });
    config.rcc.sys = Sysclk::PLL1_P;
    config.rcc.ahb_pre = AHBPrescaler::DIV1;
    config.rcc.apb1_pre = APBPrescaler::DIV4;
    config.rcc.apb2_pre = APBPrescaler::DIV2;
    config
}

#[embassy_executor::main]
async fn main(spawner: Spawner) {
    let p = embassy_stm32::init(clocks());
    defmt::info!("wirekit firmware on nucleo-f429zi");
    spawner.spawn(wirekit_firmware::spawned(
        watchdog_task(IndependentWatchdog::new(p.IWDG, WATCHDOG_US)),
        "watchdog_task",
    ));

    let mut rng = Rng::new(p.RNG, Irqs);
    let mut seed = [0; 8];
    rng.async_fill_bytes(&mut seed)
        .await
        .unwrap_or_else(|_| defmt::panic!("the RNG failed"));
    let seed = u64::from_le_bytes(seed);

    // A locally administered address derived from the chip's unique ID: all of it (bytes 0-3
    // are the die's place on its wafer, 4 the wafer, 5-11 the lot) folded into five bytes, so
    // boards from two lots at the same place on their wafers are unlikely to share an address
    // (not sure never to: 12 bytes into 5, bytes 5 and 10, 6 and 11 landing on the same one).
    let uid = embassy_stm32::uid::uid();
    let mut mac = [0x02, 0, 0, 0, 0, 0];
    for (i, b) in uid.iter().enumerate() {
        mac[1 + i % 5] ^= b;
    }
    defmt::info!("mac {=[u8]:02x}", mac);

    static QUEUE: ConstStaticCell<PacketQueue<4, 4>> = ConstStaticCell::new(PacketQueue::new());
    let device = Ethernet::new(
        QUEUE.take(),
        p.ETH,
        Irqs,
        p.PA1,
        p.PA7,
        p.PC4,
        p.PC5,
        p.PG13,
        p.PB13,
        p.PG11,
        mac,
        p.ETH_SMA,
        p.PA2,
        p.PC1,
    );

    let config = embassy_net::Config::dhcpv4(Default::default());
    static RESOURCES: StaticCell<StackResources<{ SOCKETS + 1 }>> = StaticCell::new();
    let (stack, runner) = embassy_net::new(
        Paced::new(device),
        config,
        RESOURCES.init(StackResources::new()),
        seed,
    );
    spawner.spawn(wirekit_firmware::spawned(net_task(runner), "net_task"));

    server::init();
    static TCP: ConstStaticCell<[TcpBuffers; SOCKETS]> =
        ConstStaticCell::new([const { TcpBuffers::new() }; SOCKETS]);
    for (id, tcp) in TCP.take().iter_mut().enumerate() {
        spawner.spawn(wirekit_firmware::spawned(
            connection_task(stack, id, tcp),
            "connection_task",
        ));
    }
    // Every change of address is logged, not the first alone: a new lease, or the address
    // lost with the link (which resets every connection), shows in the log.
    loop {
        stack.wait_config_up().await;
        if let Some(v4) = stack.config_v4() {
            defmt::info!(
                "network up: {}, serving on port {=u16}",
                v4.address,
                server::SERVICE_PORT
            );
        }
        stack.wait_config_down().await;
        defmt::warn!("network down: no IPv4 address (link or DHCP lease lost)");
    }
}
