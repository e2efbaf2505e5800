//! The module's C ABI on wasm32: four exported functions over two buffers the module owns, so that no pointer
//! from outside is ever dereferenced by Rust code here (the host writes into the input buffer through the
//! module's memory; the buffers live in thread-locals, and wasm32 has one thread).
//!
//! ```text
//! input(len) -> ptr            a buffer of len bytes (evidence, then the request JSON), zeroed
//! verify(evidence_len, request_len) -> 0 | 1   0: ran (the output is the result JSON), 1: the lengths exceed
//!                                              the buffer (the output is an error JSON)
//! output_ptr() -> ptr, output_len() -> len     the last result JSON, UTF-8
//! ```
//!
//! `#[no_mangle]` is what the workspace's `unsafe_code` lint flags here: the functions export their names, and
//! nothing in this module is `unsafe` otherwise.

use std::cell::RefCell;

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// A zeroed input buffer of `len` bytes; its address in the module's memory.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn input(len: usize) -> *mut u8 {
    INPUT.with(|b| {
        let mut b = b.borrow_mut();
        *b = vec![0u8; len];
        b.as_mut_ptr()
    })
}

/// Verifies the input buffer: its first `evidence_len` bytes are the evidence, the next `request_len` the
/// request JSON. The result JSON is left in the output buffer.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn verify(evidence_len: usize, request_len: usize) -> u32 {
    let (code, out) = INPUT.with(|b| {
        let b = b.borrow();
        match evidence_len
            .checked_add(request_len)
            .filter(|n| *n <= b.len())
        {
            Some(_) => (
                0,
                crate::verify_json(
                    &b[..evidence_len],
                    &b[evidence_len..evidence_len + request_len],
                ),
            ),
            None => (
                1,
                serde_json::json!({"error": {"check": "input", "detail": format!(
                    "{evidence_len} + {request_len} bytes asked of an input buffer of {}", b.len())}})
                .to_string(),
            ),
        }
    });
    OUTPUT.with(|o| *o.borrow_mut() = out.into_bytes());
    code
}

/// The address of the last result JSON.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn output_ptr() -> *const u8 {
    OUTPUT.with(|o| o.borrow().as_ptr())
}

/// The length of the last result JSON.
#[allow(unsafe_code)]
#[no_mangle]
pub extern "C" fn output_len() -> usize {
    OUTPUT.with(|o| o.borrow().len())
}

/// The randomness source getrandom 0.2 uses on wasm32: there is none, and the check needs none.
fn no_randomness(_buf: &mut [u8]) -> Result<(), getrandom::Error> {
    Err(getrandom::Error::UNSUPPORTED)
}
getrandom::register_custom_getrandom!(no_randomness);
