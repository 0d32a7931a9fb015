//! The splice pipe budget (its own process: the budget is process-wide). A relay direction
//! that finds the budget spent copies instead, every byte still relayed.

#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_spent_pipe_budget_copies_instead() {
    use std::sync::atomic::AtomicU64;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;
    use wirekit_proxy::ByteBudget;
    use wirekit_proxy::relay::{ByteCounters, relay, set_pipe_budget};

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        (c, l.accept().await.unwrap().0)
    }
    for (budget, spliced) in [(0, false), (usize::MAX, true)] {
        set_pipe_budget(budget);
        let (mut client, proxy_client) = pair().await;
        let (proxy_up, mut upstream) = pair().await;
        let counters = [AtomicU64::new(0), AtomicU64::new(0)];
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let peer = tokio::spawn(async move {
            client.write_all(&sent).await.unwrap();
            client.shutdown().await.unwrap();
            let mut back = Vec::new();
            client.read_to_end(&mut back).await.unwrap();
            back
        });
        let echo = tokio::spawn(async move {
            let mut got = Vec::new();
            upstream.read_to_end(&mut got).await.unwrap();
            upstream.write_all(&got).await.unwrap();
            upstream.shutdown().await.unwrap();
            got
        });
        let outcome = relay(
            proxy_client,
            proxy_up,
            ByteBudget::OFF,
            ByteBudget::OFF,
            ByteCounters {
                serverbound: &counters[0],
                clientbound: &counters[1],
            },
            std::time::Duration::from_secs(10),
            &CancellationToken::new(),
        )
        .await;
        assert_eq!(echo.await.unwrap(), data);
        assert_eq!(peer.await.unwrap(), data);
        assert_eq!(outcome.spliced, spliced, "budget {budget}");
        assert_eq!(
            (outcome.serverbound, outcome.clientbound),
            (200_000, 200_000)
        );
    }
    assert_eq!(wirekit_proxy::relay::pipe_budget(20_064, 10_000, 64), 0);
    assert_eq!(
        wirekit_proxy::relay::pipe_budget(1 << 20, 10_000, 64),
        514_256
    );
    assert_eq!(wirekit_proxy::relay::pipe_budget(100, 1_000, 64), 0);
}
