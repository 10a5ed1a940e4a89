//! The domain: the refinement hierarchy with its patches and their sides, body
//! geometry and cell flags, and the index orders the kernels share.
//!
//! Everything here is plain data computed on the host; nothing allocates device
//! memory or knows about a driver.

pub mod geometry;
pub mod hierarchy;
pub mod order;
pub mod sides;
