//! CubeCL kernels of the explicit exponential: one cube per matrix, persistent over the batch.
//!
//! The kernels are small interpreters. The host compiles each scheme of `expm::scheme` into a
//! slot program ([`super::program`]): products, linear combinations and a solve over n x n slots
//! of the cube's workspace. [`expm_kernel`] and [`frechet_kernel`] load a matrix, pick its
//! degree and squarings from its 1-norm, then run that degree's program and the squarings.
//! Matrix size, degree and k-slab width are run-time values: a shader is compiled per
//! workgroup size (32 to 256 units, by n), per power of two of n above 64 and, where the slots
//! are resident, per power of two of n^2 and (on CUDA) whether n is a multiple of 4, not per n
//! and degree (a per-size shader took seconds
//! to compile on software Vulkan, and each inlined product multiplied the shader's size).
//!
//! The slots live in shared memory where the device has room for all of them (resident), else
//! in the cube's part of a device-memory workspace, whose products stage k-slabs of their
//! operands in shared memory. Every unit accumulates a 4 x 4 tile of a product in registers; on
//! CUDA, resident slots are read and written four floats at a time (`wide`). A product or
//! combination writes slots that other units of the cube read next, so each ends with a barrier
//! (`sync_cube`, and `sync_storage` where the slots lie in device memory). Loops and
//! branches that contain barriers depend only on values that are the same for the whole cube
//! (the program, and the plan at the cube's own matrix), so the barriers sit in uniform control
//! flow.

use super::program::{
    ENTRY, HEADER, KIND_COMBINE, KIND_LOAD, KIND_MUL, KIND_SOLVE, KIND_STORE, KIND_TANGENT,
    PLAN_HEADER, ROW, SAVED,
};
use super::taylor::{ROUTE_DENSE, ROUTE_STRIDE, is_kind};

/// Entries per matrix in the plan buffer: scale 2^-s (a NaN for a non-finite matrix), s,
/// degree, and 1 for a finite matrix or 0.
pub(crate) const PLAN_STRIDE: usize = 4;
/// Most units per cube (the size of the per-unit shared arrays).
pub(crate) const MAX_UNITS: usize = 256;
/// Widest k-slab of a product.
const MAX_TK: usize = 32;

mod entry;
mod interpreter;
mod memory;
mod plan;
mod products;
mod solve;

pub(crate) use entry::*;
pub(crate) use interpreter::*;
