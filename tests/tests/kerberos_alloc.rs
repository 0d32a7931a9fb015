//! Kerberos key derivation (single, batch, dispatched), encryption and tickets allocate
//! nothing.

use wirekit::alloc_count::{CountingAlloc, assert_counting_installed, count_allocations};
use wirekit_core::kerberos::{
    KerberosEncryption, KeyRequest, PidWidth, TicketContents, TicketFormat, TicketVersion,
    build_ticket, derive_kerberos_key, derive_kerberos_keys, open_internal_ticket, open_ticket,
};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[test]
fn kerberos_allocates_nothing() {
    assert_counting_installed();
    let passwords: Vec<Vec<u8>> = (0..40).map(|i| vec![b'q'; i * 7]).collect();
    let requests: Vec<KeyRequest<'_>> = passwords
        .iter()
        .enumerate()
        .map(|(i, p)| KeyRequest {
            pid: i as u64 * 1001,
            password: p,
        })
        .collect();
    let mut keys = vec![[0u8; 16]; requests.len()];
    let mut keys_dispatched = vec![[0u8; 16]; requests.len()];
    let mut ticket = vec![0u8; 256];
    let mut data = vec![0x42u8; 1024 + 16];
    // Detect the CPU's features before counting: std caches them on first use.
    let _ = wirekit_accel::kerberos::LanePath::detect();

    let (single, stats) = count_allocations(|| {
        let single = derive_kerberos_key(100, b"MMQea3n!fsik");
        derive_kerberos_keys(&requests, &mut keys).unwrap();
        wirekit_accel::kerberos::derive_kerberos_keys(&requests, &mut keys_dispatched).unwrap();

        let enc = KerberosEncryption::new(&single).unwrap();
        let n = enc.encrypt_in_place(&mut data, 1024).unwrap();
        assert_eq!(enc.decrypt_in_place(&mut data[..n]).unwrap().len(), 1024);

        for version in [TicketVersion::V0, TicketVersion::V1] {
            let format = TicketFormat {
                version,
                pid_width: PidWidth::U64,
            };
            let contents = TicketContents {
                session_key: &[3; 32],
                target_pid: 2,
                issued: 12345,
                source_pid: 1 << 40,
            };
            let n =
                build_ticket(format, &single, &[2; 16], &contents, &[9; 16], &mut ticket).unwrap();
            let opened = open_ticket(format, &single, &mut ticket[..n], 32).unwrap();
            let internal = open_internal_ticket(format, &[2; 16], opened.internal, 32).unwrap();
            assert_eq!(internal.source_pid, 1 << 40);
        }
        single
    });
    assert_eq!(stats.count, 0, "{stats:?}");
    assert_eq!(single[0], 0x9e);
    assert_eq!(keys, keys_dispatched);
    assert_eq!(keys[3], derive_kerberos_key(3003, &passwords[3]));
}
