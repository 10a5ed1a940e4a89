//! [`Nccl`]: the collective a split run's halos travel through between CUDA
//! devices ([`lbm_core::device::Collective`]), over cudarc's NCCL bindings
//! (loaded at run time, like the driver library).
//!
//! One communicator for the run, made by `ncclCommInitAll` over the distinct
//! devices of the split in order of first appearance: one rank per device.
//! Two slabs on one device send to and receive from their device's own rank,
//! which NCCL carries as a copy on that device. Each transfer's send and
//! receive go on the streams the slabs named (their exchange streams), all
//! of one exchange in one NCCL group, so a single host thread drives every
//! device without deadlock.
//!
//! What it does not do: span processes or nodes (`ncclCommInitRank` with a
//! unique id handed round by MPI or a TCP rendezvous; docs/SCALING.md has
//! the plan), or pick up a library that is installed only as `libnccl.so.2`
//! (cudarc looks for `libnccl.so`).

use cudarc::nccl::{result, sys};
use lbm_core::device::{Collective, Transfer};
use lbm_core::{Error, Result};

const LIBRARY: &str = "nccl";

/// A communicator over the devices of one process; see the module
/// documentation.
pub struct Nccl {
    /// The device ordinal of each rank, and its communicator.
    ranks: Vec<(usize, sys::ncclComm_t)>,
}

// SAFETY: NCCL communicators may be used from any thread as long as calls on
// one communicator are not concurrent; `Nccl` is used through `&mut self`
// only, so one thread at a time calls into it.
unsafe impl Send for Nccl {}

fn nccl_error(operation: impl Into<String>, e: result::NcclError) -> Error {
    Error::Collective {
        library: LIBRARY,
        operation: operation.into(),
        code: format!("{:?}", e.0),
    }
}

/// Whether NCCL's library can be loaded (cudarc panics on a call without it).
fn nccl_library_present() -> bool {
    // SAFETY: only tries to load the library; no NCCL call is made.
    unsafe { sys::is_culib_present() }
}

impl Nccl {
    /// One communicator over `devices` (the split's device of each slab,
    /// repeats allowed), or `None` when NCCL's library is not found.
    pub fn open(devices: &[usize]) -> Result<Option<Nccl>> {
        if !crate::driver_library_present() || !nccl_library_present() {
            return Ok(None);
        }
        let mut ordinals: Vec<usize> = Vec::new();
        for &d in devices {
            if !ordinals.contains(&d) {
                ordinals.push(d);
            }
        }
        let list: Vec<i32> = ordinals
            .iter()
            .map(|&d| {
                i32::try_from(d).map_err(|_| {
                    nccl_error(
                        format!("open a communicator on device {d}"),
                        result::NcclError(sys::ncclResult_t::ncclInvalidArgument),
                    )
                })
            })
            .collect::<Result<_>>()?;
        let mut comms = vec![std::ptr::null_mut(); list.len()];
        // SAFETY: `comms` has room for one communicator per listed device,
        // and `list` holds `list.len()` distinct device ordinals.
        unsafe { result::comm_init_all(comms.as_mut_ptr(), list.len() as i32, list.as_ptr()) }
            .map_err(|e| nccl_error(format!("open a communicator over devices {ordinals:?}"), e))?;
        Ok(Some(Nccl {
            ranks: ordinals.into_iter().zip(comms).collect(),
        }))
    }

    /// The rank of `device` and its communicator.
    fn rank(&self, device: usize, operation: &str) -> Result<(i32, sys::ncclComm_t)> {
        self.ranks
            .iter()
            .position(|r| r.0 == device)
            .map(|k| (k as i32, self.ranks[k].1))
            .ok_or_else(|| Error::NotAvailable {
                what: format!("{operation} on device {device}"),
                reason: "the device is not one of the communicator's",
            })
    }
}

impl Collective for Nccl {
    fn name(&self) -> &'static str {
        LIBRARY
    }

    fn transfer(&mut self, transfers: &[Transfer]) -> Result<()> {
        // Resolve every rank before the group opens, so a refusal leaves no
        // group half built.
        let mut calls = Vec::with_capacity(transfers.len());
        for t in transfers {
            for (what, backend) in [
                ("the source", t.src.backend),
                ("the destination", t.dst.backend),
                ("the send stream", t.send_on.backend),
                ("the receive stream", t.recv_on.backend),
            ] {
                if backend != "cuda" {
                    return Err(Error::NotAvailable {
                        what: format!("an NCCL transfer with {what} on the {backend} backend"),
                        reason: "NCCL moves only CUDA buffers",
                    });
                }
            }
            if t.dst.bytes < t.src.bytes {
                return Err(Error::NotAvailable {
                    what: format!("a transfer of {} bytes into {} bytes", t.src.bytes, t.dst.bytes),
                    reason: "the destination must hold every byte of the source",
                });
            }
            let (from, send_comm) = self.rank(t.send_on.device, "a send")?;
            let (to, recv_comm) = self.rank(t.recv_on.device, "a receive")?;
            calls.push((t, from, send_comm, to, recv_comm));
        }
        result::group_start().map_err(|e| nccl_error("open a group", e))?;
        let mut issued = Ok(());
        for (t, from, send_comm, to, recv_comm) in calls {
            // SAFETY: both buffers are live device allocations of `bytes`
            // bytes or more (the sharing drivers keep them until the streams
            // are done), on the devices of the streams' ranks; the streams
            // are live streams of those devices.
            issued = unsafe {
                result::send(
                    t.src.address as *const _,
                    t.src.bytes,
                    sys::ncclDataType_t::ncclUint8,
                    to,
                    send_comm,
                    t.send_on.handle as sys::cudaStream_t,
                )
                .and_then(|_| {
                    result::recv(
                        t.dst.address as *mut _,
                        t.src.bytes,
                        sys::ncclDataType_t::ncclUint8,
                        from,
                        recv_comm,
                        t.recv_on.handle as sys::cudaStream_t,
                    )
                })
            }
            .map(|_| ())
            .map_err(|e| {
                nccl_error(
                    format!(
                        "enqueue a transfer of {} bytes from device rank {from} to {to}",
                        t.src.bytes
                    ),
                    e,
                )
            });
            if issued.is_err() {
                break;
            }
        }
        // The group is closed whatever happened inside it.
        let closed = result::group_end()
            .map(|_| ())
            .map_err(|e| nccl_error("launch a group", e));
        issued.and(closed)
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        for &(_, comm) in &self.ranks {
            // SAFETY: each communicator was made by `open` and is destroyed
            // once, here; finalising first waits for its operations in flight.
            unsafe {
                let _ = result::comm_finalize(comm);
                let _ = result::comm_destroy(comm);
            }
        }
    }
}
