//! The answer: how a request that the stages ran as enforce mode would
//! ends. `shadow.rs` gives the route's mode its say (enforce answers the
//! ruling, shadow sends the request on); `report.rs` counts and logs each
//! request's end exactly once.

pub(crate) mod report;
pub(crate) mod shadow;
