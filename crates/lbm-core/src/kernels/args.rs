//! Launch arguments in order: the reader the decoders share, which checks each
//! argument's kind, and the writers of the composite arguments (layouts,
//! rectangles, patch sides).
//!
//! Which arguments a kernel takes is its family's business.

use crate::device::{Arg, BufferRef, Kernel, Launch};
use crate::domain::hierarchy::{Layout, Rect};
use crate::domain::sides::{PatchSide, PatchSides};
use crate::error::{Error, LaunchProblem, Result};

fn arg_error(problem: LaunchProblem, kernel: Kernel) -> Error {
    Error::Launch { kernel, problem }
}

/// Reads a launch's arguments in order, checking each one's kind.
pub(super) struct ArgReader<'a> {
    kernel: Kernel,
    args: &'a [Arg],
    next: usize,
}

impl<'a> ArgReader<'a> {
    pub(super) fn new(launch: &'a Launch, kernel: Kernel, params: &[&str]) -> Result<Self> {
        if launch.kernel != kernel {
            return Err(arg_error(
                LaunchProblem::Shape(format!("the launch is for {}", launch.kernel)),
                kernel,
            ));
        }
        if launch.args.len() != params.len() {
            return Err(arg_error(
                LaunchProblem::ArgCount {
                    expected: params.len(),
                    got: launch.args.len(),
                },
                kernel,
            ));
        }
        Ok(ArgReader {
            kernel,
            args: &launch.args,
            next: 0,
        })
    }
    /// The next argument; `new` checked the count against the parameter
    /// list, which every decoder reads exactly.
    pub(super) fn take(&mut self) -> (usize, &'a Arg) {
        let index = self.next;
        self.next += 1;
        (index, &self.args[index])
    }
    pub(super) fn kind_error(&self, index: usize, expected: &'static str, got: &str) -> Error {
        arg_error(
            LaunchProblem::ArgKind {
                index,
                expected,
                got: got.to_owned(),
            },
            self.kernel,
        )
    }
    pub(super) fn buffer(&mut self) -> Result<BufferRef> {
        match self.take() {
            (_, Arg::Buffer { id, byte_offset }) => Ok(BufferRef {
                id: *id,
                byte_offset: *byte_offset,
            }),
            (i, other) => Err(self.kind_error(i, "a buffer", &format!("{other:?}"))),
        }
    }
    pub(super) fn optional_buffer(&mut self) -> Result<Option<BufferRef>> {
        match self.take() {
            (_, Arg::Buffer { id, byte_offset }) => Ok(Some(BufferRef {
                id: *id,
                byte_offset: *byte_offset,
            })),
            (_, Arg::NoBuffer) => Ok(None),
            (i, other) => Err(self.kind_error(i, "a buffer or none", &format!("{other:?}"))),
        }
    }
    pub(super) fn u32(&mut self) -> Result<u32> {
        match self.take() {
            (_, Arg::U32(v)) => Ok(*v),
            (i, other) => Err(self.kind_error(i, "u32", &format!("{other:?}"))),
        }
    }
    pub(super) fn u64(&mut self) -> Result<u64> {
        match self.take() {
            (_, Arg::U64(v)) => Ok(*v),
            (i, other) => Err(self.kind_error(i, "u64", &format!("{other:?}"))),
        }
    }
    /// A u32 flag that must say whether `buffer` is present.
    pub(super) fn presence(&mut self, param: &'static str, present: bool) -> Result<()> {
        let value = self.u32()?;
        if value != present as u32 {
            return Err(arg_error(
                LaunchProblem::ArgValue {
                    param,
                    value,
                    accepted: if present {
                        "1 (its buffer is passed)"
                    } else {
                        "0 (its buffer is absent)"
                    },
                },
                self.kernel,
            ));
        }
        Ok(())
    }
    pub(super) fn f32(&mut self) -> Result<f32> {
        match self.take() {
            (_, Arg::F32(v)) => Ok(*v),
            (i, other) => Err(self.kind_error(i, "f32", &format!("{other:?}"))),
        }
    }
    pub(super) fn layout(&mut self) -> Result<Layout> {
        Ok(Layout {
            nx: self.u32()?,
            ny: self.u32()?,
            tile: [self.u32()?, self.u32()?],
        })
    }
    pub(super) fn rect(&mut self) -> Result<Rect> {
        Ok(Rect::new(self.u32()?, self.u32()?, self.u32()?, self.u32()?))
    }
    /// The error for `param`'s `value`, which is not among those `accepted`.
    pub(super) fn value_error(&self, param: &'static str, value: u32, accepted: &'static str) -> Error {
        arg_error(LaunchProblem::ArgValue { param, value, accepted }, self.kernel)
    }
    pub(super) fn side_kinds(&mut self) -> Result<[PatchSide; 4]> {
        let packed = self.u32()?;
        PatchSide::unpack(packed)
            .map_err(|value| self.value_error("side_kinds", value, "four 2-bit side codes 0..=2, x-min lowest"))
    }
    pub(super) fn patch_sides(&mut self) -> Result<PatchSides> {
        Ok(PatchSides {
            kinds: self.side_kinds()?,
            tangential: [self.f32()?, self.f32()?, self.f32()?, self.f32()?],
        })
    }
}

pub(super) fn push_sides(args: &mut Vec<Arg>, sides: &PatchSides) {
    args.push(Arg::U32(PatchSide::pack(sides.kinds)));
    args.extend(sides.tangential.map(Arg::F32));
}

pub(super) fn push_layout(args: &mut Vec<Arg>, layout: &Layout) {
    args.extend([
        Arg::U32(layout.nx),
        Arg::U32(layout.ny),
        Arg::U32(layout.tile[0]),
        Arg::U32(layout.tile[1]),
    ]);
}

pub(super) fn push_rect(args: &mut Vec<Arg>, rect: &Rect) {
    args.extend([
        Arg::U32(rect.x0),
        Arg::U32(rect.y0),
        Arg::U32(rect.x1),
        Arg::U32(rect.y1),
    ]);
}
