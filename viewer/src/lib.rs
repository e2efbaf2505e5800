//! The run viewer: a fenced-run verdict, verified with `verifier_lib`, as one server-rendered HTML page that
//! links every claim to the check behind it, served on loopback only behind a random per-run token.
//! Layers: [`model`] (verification -> page model), [`render`] (model -> HTML), [`server`] (HTTP on loopback),
//! [`browser`] (the same check run in the founder's browser by `verifier-wasm`).

pub mod bind;
pub mod browser;
pub mod docs;
pub mod model;
pub mod render;
pub mod server;
pub mod token;

pub use model::{Page, PageError};
pub use server::{start, start_with_module, Running, ServeConfig, ServeError};
