//! Admission: stages 1 to 4, each a function of the request that returns
//! the next type or a rejection. Nothing here touches the store: a request
//! is routed, its body read, its signature and parameters verified, its
//! business fields guarded, and it is given its key, its fingerprint and,
//! on an entity route, the change it announces.
//!
//! ```text
//! route.rs       stage 1: the route by canonical path and method
//! parameters.rs  what a query, header or form field may add beside a signed body
//! body.rs        stage 2: the body, within its limits and the shared budget
//! verify.rs      stage 3: signature and timestamp window
//! guard.rs       business-field whitelists
//! identify.rs    stage 4: key, fingerprint, probe plan
//! entity.rs      the entity and change a delivery announces
//! key_join.rs    how key parts are joined, shared by identify and entity
//! ```

pub(crate) mod body;
pub mod entity;
pub(crate) mod guard;
pub mod identify;
pub(in crate::pipeline) mod key_join;
pub mod parameters;
pub mod route;
pub mod verify;
