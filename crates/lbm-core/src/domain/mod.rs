//! The domain: the refinement hierarchy with its patches and their sides, body
//! geometry and cell flags, the index orders the kernels share, and the split
//! of a run over several devices.
//!
//! Everything here is plain data computed on the host; nothing allocates device
//! memory or knows about a driver.

pub mod decompose;
pub mod geometry;
pub mod hierarchy;
pub mod order;
pub mod sides;
