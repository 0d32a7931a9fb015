//! Splitting an input into the pieces a peer might send it in, for the targets that check a
//! stream decoder gives the same result whatever the split. Included by path.

/// Cuts `data` into consecutive pieces whose lengths come from `cuts` (each taken modulo a
/// bound that grows with the input, 0 meaning "an empty read"); the last piece takes the rest.
/// The pieces joined are `data`.
#[allow(dead_code)]
pub fn pieces<'a>(data: &'a [u8], cuts: &[u16]) -> Vec<&'a [u8]> {
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut rest = data;
    for &c in cuts {
        if rest.is_empty() {
            break;
        }
        let n = usize::from(c) % (rest.len() + 1);
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    out.push(rest);
    out
}
