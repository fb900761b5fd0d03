//! The schemes of `expm::scheme` compiled into the slot programs that the GPU kernels interpret.
//!
//! A scheme is a straight-line program over values (value 0 is the scaled X). Here each value
//! gets one of a few n x n workspace slots, reusing a slot once its value is dead, and each step
//! becomes a row of the `ops` table (kind, destination, up to five source slots, a flag) with
//! its coefficients in the same row of `vals`. The forward adds Padé's solve; the Fréchet
//! derivative interleaves forward mode (d(PQ) = dP Q + P dQ) with the scheme, each product and
//! its tangent in one row (whose last slot field is the tangent's destination). Under autodiff
//! the Taylor forward also stores the values its derivative reads, and the derivative from that
//! checkpoint loads them and computes the tangents alone. A header indexed
//! by degree gives each program's first row, length and result slots, so the device picks a
//! program per matrix from the plan without the host.

use std::sync::OnceLock;

use crate::expm::ExpmMethod;
use crate::expm::plan::{self, Precision};
use crate::expm::scheme::{self, Program, Step};

/// Row kind: work[dst] = work[s1] work[s2] (+= when the flag is 1).
pub(crate) const KIND_MUL: u32 = 0;
/// Row kind: work[dst] = eye I + sum_k c_k work[s_k], five terms.
pub(crate) const KIND_COMBINE: u32 = 1;
/// Row kind: work[dst] <- work[s1]^{-1} work[dst].
pub(crate) const KIND_SOLVE: u32 = 2;
/// Row kind: work[dst] = work[s1] work[s2] and work[s5] = work[s3] work[s2] + work[s1] work[s4]:
/// a product P Q and its tangent dP Q + P dQ in one pass over the four operands (the Fréchet
/// programs' products and squarings).
pub(crate) const KIND_TANGENT: u32 = 3;
/// Row kind: work[dst] = the matrix's saved value number s1 (the derivative from a checkpoint
/// reads the forward's values instead of recomputing them); with the flag 1, only where the
/// plan squares (the result T, which only the squarings read).
pub(crate) const KIND_LOAD: u32 = 4;
/// Row kind: the matrix's saved value number s1 = work[dst] (the checkpointing forward); with
/// the flag 1, only where the plan squares.
pub(crate) const KIND_STORE: u32 = 5;
/// Values a checkpointing forward saves per matrix: the most of any Taylor program (degree 18:
/// the six operands of its products other than X, and its result).
pub(crate) const SAVED: usize = 7;
/// u32 per row of `ops` (and f32 per row of `vals`: eye, c_1..c_5, padding).
pub(crate) const ROW: usize = 8;
/// Header entry per degree: first row, number of rows, result slot, derivative slot, and the two
/// slots the squarings write (dead program slots where there are some).
pub(crate) const ENTRY: usize = 6;
/// Degrees 0..=18 have a header entry (unused degrees have no rows).
const DEGREES: usize = 19;
/// u32 before the first row of `ops`.
pub(crate) const HEADER: usize = DEGREES * ENTRY;
/// Source terms of one combination row.
const TERMS: usize = 5;
/// f32 of a planning table before its (theta, degree) pairs: their number and the largest s.
pub(crate) const PLAN_HEADER: usize = 2;

/// The programs of one kernel as the device reads them (little-endian bytes): `ops` (u32) and
/// `vals` (f32), the planning table (f32: the number of (theta, degree) pairs, the largest s,
/// then the pairs in ascending theta; [`PLAN_HEADER`] floats precede the pairs), and the
/// workspace slots per cube that the largest program (and the squarings) needs.
#[derive(Debug, Clone)]
pub(crate) struct Table {
    pub ops_bytes: Vec<u8>,
    pub vals_bytes: Vec<u8>,
    pub plan_bytes: Vec<u8>,
    pub slots: usize,
    /// Whether a program has a solve (the kernels then hold its shared arrays).
    pub solves: bool,
}

/// A step over values, before slots are assigned.
#[derive(Debug, Clone)]
enum Op {
    /// `out = a b`, or `out += a b` when `accumulate` (then `out` already holds a value).
    Mul {
        a: usize,
        b: usize,
        accumulate: bool,
    },
    /// `out = eye I + sum c_k v_k` (`out` may be among the terms).
    Lin { terms: Vec<(usize, f64)>, eye: f64 },
    /// `out <- q^{-1} out`.
    Solve { q: usize },
    /// `out` = the matrix's saved value number `index`; with `squarings_only`, only where the
    /// plan squares (the value is read by the squarings alone).
    Load { index: usize, squarings_only: bool },
    /// The matrix's saved value number `index` = `out` (which already holds a value); with
    /// `squarings_only`, only where the plan squares.
    Store { index: usize, squarings_only: bool },
}

/// A program over values: `inputs` values exist before the first step (X, and E for the
/// derivative); each step writes value `out`.
#[derive(Debug, Clone)]
struct Flow {
    inputs: usize,
    values: usize,
    steps: Vec<(usize, Op)>,
}

impl Flow {
    fn new(inputs: usize) -> Self {
        Self {
            inputs,
            values: inputs,
            steps: Vec::new(),
        }
    }

    fn fresh(&mut self) -> usize {
        self.values += 1;
        self.values - 1
    }

    fn mul(&mut self, a: usize, b: usize) -> usize {
        let out = self.fresh();
        self.steps.push((
            out,
            Op::Mul {
                a,
                b,
                accumulate: false,
            },
        ));
        out
    }

    fn mul_add(&mut self, out: usize, a: usize, b: usize) {
        self.steps.push((
            out,
            Op::Mul {
                a,
                b,
                accumulate: true,
            },
        ));
    }

    /// A combination; terms with coefficient 0 are dropped and more than five are chained.
    fn lin(&mut self, terms: &[(usize, f64)], eye: f64) -> usize {
        let terms: Vec<(usize, f64)> = terms.iter().copied().filter(|t| t.1 != 0.0).collect();
        let out = self.fresh();
        let (first, rest) = terms.split_at(terms.len().min(TERMS));
        let first = first.to_vec();
        self.steps.push((out, Op::Lin { terms: first, eye }));
        // Further rows add four terms each to the partial sum.
        for chunk in rest.chunks(TERMS - 1) {
            let mut next = vec![(out, 1.0)];
            next.extend_from_slice(chunk);
            self.steps.push((
                out,
                Op::Lin {
                    terms: next,
                    eye: 0.0,
                },
            ));
        }
        out
    }

    /// Appends a scheme whose value 0 is `x`; returns the flow values of the scheme's values.
    /// With `save`, each value of [`saved_values`] is saved (as its number there) once computed.
    fn scheme(&mut self, program: &Program, x: usize, save: bool) -> Vec<usize> {
        let saved = if save {
            saved_values(program)
        } else {
            Vec::new()
        };
        let mut map = vec![x; program.steps.len() + 1];
        for k in lazy_order(program) {
            map[k + 1] = match &program.steps[k] {
                Step::MatMul(i, j) => self.mul(map[*i], map[*j]),
                Step::Lin(terms, eye) => self.lin(&relabel(terms, &map), *eye),
            };
            if let Some(index) = saved.iter().position(|&v| v == k + 1) {
                // The result is saved for the derivative's squarings alone.
                let squarings_only = k + 1 == program.outputs.0;
                self.steps.push((
                    map[k + 1],
                    Op::Store {
                        index,
                        squarings_only,
                    },
                ));
            }
        }
        map
    }

    /// Appends a scheme and its forward-mode derivative at (X, E) = values (0, 1): each product
    /// P Q is computed with its tangent dP Q + P dQ (three products per product).
    fn scheme_and_derivative(&mut self, program: &Program) -> (Vec<usize>, Vec<usize>) {
        let (mut map, mut dmap) = (
            vec![0; program.steps.len() + 1],
            vec![1; program.steps.len() + 1],
        );
        for k in lazy_order(program) {
            match &program.steps[k] {
                Step::MatMul(i, j) => {
                    map[k + 1] = self.mul(map[*i], map[*j]);
                    let d = self.mul(dmap[*i], map[*j]);
                    self.mul_add(d, map[*i], dmap[*j]);
                    dmap[k + 1] = d;
                }
                Step::Lin(terms, eye) => {
                    map[k + 1] = self.lin(&relabel(terms, &map), *eye);
                    dmap[k + 1] = self.lin(&relabel(terms, &dmap), 0.0);
                }
            }
        }
        (map, dmap)
    }

    /// Appends the forward-mode derivative of a scheme at (X, E) = values (0, 1) over the
    /// values that the checkpointing forward saved ([`saved_values`]): no value of the scheme
    /// is computed again, only tangents, so a product costs two products (dP Q, then += P dQ)
    /// and a combination one pass over the tangents. Returns the flow values of T (loaded last,
    /// for the squarings) and of its tangent.
    ///
    /// Two choices keep the live tangents few (the slots set the shared memory of a cube, and
    /// with it the cubes per multiprocessor): the steps run in program order, so the
    /// combinations over the same tangents follow one another and the last of them may take
    /// the slot of a tangent that dies there; and a product whose only use is a combination that
    /// adds it once has its tangent added into that combination's tangent in place, with no slot
    /// of its own. Each saved value is loaded just before the product that reads it.
    fn derivative_from_checkpoint(&mut self, program: &Program) -> (usize, usize) {
        let saved = saved_values(program);
        let values = program.steps.len() + 1;
        let output = program.outputs.0;
        // The result is saved and loaded only where the plan squares: no product may read it.
        assert!(
            program
                .steps
                .iter()
                .all(|s| !matches!(s, Step::MatMul(i, j) if *i == output || *j == output)),
            "the result of a scheme is an operand of one of its products"
        );
        // Reads of each value's tangent: one per operand and per term, and the result's.
        let mut uses = vec![0usize; values];
        for step in &program.steps {
            match step {
                Step::MatMul(i, j) => [*i, *j].iter().for_each(|&v| uses[v] += 1),
                Step::Lin(terms, _) => terms.iter().for_each(|t| uses[t.0] += 1),
            }
        }
        uses[output] += 1;
        // The combination step that takes each product's tangent in (coefficient 1, no other use).
        let mut taken_by = vec![None; program.steps.len()];
        for (k, step) in program.steps.iter().enumerate() {
            if let Step::Lin(terms, _) = step {
                for &(v, c) in terms {
                    let product = v > 0 && matches!(program.steps[v - 1], Step::MatMul(..));
                    if product && c == 1.0 && uses[v] == 1 && taken_by[v - 1].is_none() {
                        taken_by[v - 1] = Some(k);
                        break;
                    }
                }
            }
        }
        let mut dmap = vec![1; values];
        for (k, step) in program.steps.iter().enumerate() {
            match step {
                Step::MatMul(i, j) if taken_by[k].is_none() => {
                    dmap[k + 1] =
                        self.product_tangent(None, (*i, dmap[*i]), (*j, dmap[*j]), &saved);
                }
                Step::MatMul(..) => {}
                Step::Lin(terms, _) => {
                    let taken = terms
                        .iter()
                        .map(|t| t.0)
                        .find(|&v| v > 0 && taken_by[v - 1] == Some(k));
                    let rest: Vec<(usize, f64)> = terms
                        .iter()
                        .copied()
                        .filter(|t| Some(t.0) != taken)
                        .collect();
                    dmap[k + 1] = match taken {
                        None => self.lin(&relabel(&rest, &dmap), 0.0),
                        Some(p) => {
                            let Step::MatMul(i, j) = program.steps[p - 1] else {
                                unreachable!("only products are taken in")
                            };
                            let into = match rest.as_slice() {
                                [] => None,
                                // The one other term's tangent is read nowhere else: add in place.
                                [(v, c)] if *c == 1.0 && *v > 0 && uses[*v] == 1 => Some(dmap[*v]),
                                _ => Some(self.lin(&relabel(&rest, &dmap), 0.0)),
                            };
                            self.product_tangent(into, (i, dmap[i]), (j, dmap[j]), &saved)
                        }
                    };
                }
            }
        }
        let t = self.load(output, &saved, true);
        (t, dmap[output])
    }

    /// dP Q + P dQ for the scheme values (p, dP) and (q, dQ), P and Q loaded from the checkpoint
    /// (value 0, X, is flow value 0), into a new value or added to `into`.
    fn product_tangent(
        &mut self,
        into: Option<usize>,
        (p, dp): (usize, usize),
        (q, dq): (usize, usize),
        saved: &[usize],
    ) -> usize {
        let q_value = self.load(q, saved, false);
        let d = match into {
            Some(d) => {
                self.mul_add(d, dp, q_value);
                d
            }
            None => self.mul(dp, q_value),
        };
        let p_value = if p == q {
            q_value
        } else {
            self.load(p, saved, false)
        };
        self.mul_add(d, p_value, dq);
        d
    }

    /// Scheme value `v` in the derivative from a checkpoint: X is flow value 0, every other
    /// value is loaded (with `squarings_only`, only where the plan squares).
    fn load(&mut self, v: usize, saved: &[usize], squarings_only: bool) -> usize {
        if v == 0 {
            return 0;
        }
        let index = saved
            .iter()
            .position(|&s| s == v)
            .expect("the checkpoint holds every operand of a product and the result");
        let out = self.fresh();
        self.steps.push((
            out,
            Op::Load {
                index,
                squarings_only,
            },
        ));
        out
    }

    /// Assigns slots (inputs keep slots 0..inputs) and appends the rows to `ops` and `vals`.
    /// Returns the slots of `results` and the number of slots used.
    fn emit(
        &self,
        results: &[usize],
        ops: &mut Vec<u32>,
        vals: &mut Vec<f32>,
    ) -> (Vec<usize>, usize) {
        let reads = |op: &Op| -> Vec<usize> {
            match op {
                Op::Mul { a, b, .. } => vec![*a, *b],
                Op::Lin { terms, .. } => terms.iter().map(|t| t.0).collect(),
                Op::Solve { q } => vec![*q],
                Op::Load { .. } | Op::Store { .. } => vec![],
            }
        };
        // The last step that touches each value; results live to the end.
        let mut last = vec![0usize; self.values];
        for (k, (out, op)) in self.steps.iter().enumerate() {
            last[*out] = k;
            for v in reads(op) {
                last[v] = k;
            }
        }
        for &r in results {
            last[r] = usize::MAX;
        }
        let mut rows = Vec::with_capacity(self.steps.len());
        let mut slot: Vec<Option<usize>> = vec![None; self.values];
        let mut busy: Vec<bool> = vec![true; self.inputs];
        for (v, s) in slot.iter_mut().enumerate().take(self.inputs) {
            *s = Some(v);
        }
        for (k, (out, op)) in self.steps.iter().enumerate() {
            // Slots of the operands whose last use this is.
            let mut dying: Vec<usize> = reads(op)
                .into_iter()
                .filter(|&v| last[v] == k && v != *out)
                .map(|v| slot[v].expect("a value is written before it is read"))
                .collect();
            // A value that is only saved after its store frees its slot there.
            if matches!(op, Op::Store { .. }) && last[*out] == k {
                dying.push(slot[*out].expect("a value is written before it is saved"));
            }
            let release = |busy: &mut Vec<bool>| dying.iter().for_each(|&s| busy[s] = false);
            // A combination reads and writes entry by entry, so its result may take the slot of
            // a term that dies here; a product may not overwrite its operands.
            let elementwise = matches!(op, Op::Lin { .. });
            if elementwise {
                release(&mut busy);
            }
            if slot[*out].is_none() {
                let free = busy.iter().position(|b| !b).unwrap_or(busy.len());
                if free == busy.len() {
                    busy.push(true);
                } else {
                    busy[free] = true;
                }
                slot[*out] = Some(free);
            }
            if !elementwise {
                release(&mut busy);
            }
            let at = |v: usize| slot[v].expect("a value is written before it is read") as u32;
            let mut row = [0u32; ROW];
            let mut coef = [0f32; ROW];
            row[1] = at(*out);
            match op {
                Op::Mul { a, b, accumulate } => {
                    row[0] = KIND_MUL;
                    row[2] = at(*a);
                    row[3] = at(*b);
                    row[7] = u32::from(*accumulate);
                }
                Op::Lin { terms, eye } => {
                    row[0] = KIND_COMBINE;
                    coef[0] = *eye as f32;
                    // Unused terms read slot 0 (always initialised) with coefficient 0.
                    for (t, &(v, c)) in terms.iter().enumerate() {
                        row[2 + t] = at(v);
                        coef[1 + t] = c as f32;
                    }
                }
                Op::Solve { q } => {
                    row[0] = KIND_SOLVE;
                    row[2] = at(*q);
                }
                Op::Load {
                    index,
                    squarings_only,
                }
                | Op::Store {
                    index,
                    squarings_only,
                } => {
                    assert!(*index < SAVED, "saved value {index} of {SAVED}");
                    row[0] = if matches!(op, Op::Load { .. }) {
                        KIND_LOAD
                    } else {
                        KIND_STORE
                    };
                    row[2] = *index as u32;
                    row[7] = u32::from(*squarings_only);
                }
            }
            rows.push((row, coef));
        }
        for (row, coef) in fuse_tangents(rows) {
            ops.extend_from_slice(&row);
            vals.extend_from_slice(&coef);
        }
        let slots = results.iter().map(|&r| slot[r].unwrap_or(r)).collect();
        (slots, busy.len())
    }
}

/// Merges each product P Q that is followed by its tangent (dP Q, then += P dQ, as
/// `scheme_and_derivative` emits them) into one [`KIND_TANGENT`] row, which reads each operand
/// once for both results. The merged row writes two slots that none of its operands use.
fn fuse_tangents(rows: Vec<([u32; ROW], [f32; ROW])>) -> Vec<([u32; ROW], [f32; ROW])> {
    let mut out = Vec::with_capacity(rows.len());
    let mut k = 0;
    while k < rows.len() {
        if let [(r0, _), (r1, _), (r2, _), ..] = &rows[k..] {
            let mul = |r: &[u32; ROW], flag: u32| r[0] == KIND_MUL && r[7] == flag;
            let (o, p, q) = (r0[1], r0[2], r0[3]);
            let (d, dp, dq) = (r1[1], r1[2], r2[3]);
            let pattern =
                mul(r0, 0) && mul(r1, 0) && mul(r2, 1) && r1[3] == q && r2[1] == d && r2[2] == p;
            let apart = o != d && [p, q, dp, dq].iter().all(|s| *s != o && *s != d);
            if pattern && apart {
                let mut row = [0u32; ROW];
                row[..7].copy_from_slice(&[KIND_TANGENT, o, p, q, dp, dq, d]);
                out.push((row, [0f32; ROW]));
                k += 3;
                continue;
            }
        }
        out.push(rows[k]);
        k += 1;
    }
    out
}

/// `terms` of a scheme's combination with each scheme value v replaced by the flow value
/// `map[v]`.
fn relabel(terms: &[(usize, f64)], map: &[usize]) -> Vec<(usize, f64)> {
    terms.iter().map(|&(v, c)| (map[v], c)).collect()
}

/// The scheme values a checkpointing forward saves, in the order of their numbers in the
/// checkpoint: every operand of a product other than X (value 0, which the derivative takes from
/// A), then the result T (for the squarings). The derivative from the checkpoint reads them and
/// computes no value of the scheme again.
fn saved_values(program: &Program) -> Vec<usize> {
    let mut saved = Vec::new();
    let operands = program.steps.iter().flat_map(|step| match step {
        Step::MatMul(i, j) => vec![*i, *j],
        Step::Lin(..) => Vec::new(),
    });
    for v in operands.chain([program.outputs.0]) {
        if v > 0 && !saved.contains(&v) {
            saved.push(v);
        }
    }
    assert!(
        saved.len() <= SAVED,
        "{} saved values of {SAVED}",
        saved.len()
    );
    saved
}

/// The scheme's steps with every combination moved to just before its first use: products keep
/// their order, and a combination's value (a Taylor B_i, say) takes a slot only once it is needed,
/// which saves slots where a scheme forms all its combinations up front.
fn lazy_order(program: &Program) -> Vec<usize> {
    fn need(program: &Program, k: usize, done: &mut [bool], order: &mut Vec<usize>) {
        if done[k] {
            return;
        }
        done[k] = true;
        let operands: Vec<usize> = match &program.steps[k] {
            Step::MatMul(i, j) => vec![*i, *j],
            Step::Lin(terms, _) => terms.iter().map(|t| t.0).collect(),
        };
        // Value v > 0 is the result of step v - 1.
        for v in operands.into_iter().filter(|&v| v > 0) {
            need(program, v - 1, done, order);
        }
        order.push(k);
    }
    let mut done = vec![false; program.steps.len()];
    let mut order = Vec::with_capacity(program.steps.len());
    for (k, step) in program.steps.iter().enumerate() {
        if matches!(step, Step::MatMul(..)) {
            need(program, k, &mut done, &mut order);
        }
    }
    for v in [program.outputs.0, program.outputs.1] {
        if v > 0 {
            need(program, v - 1, &mut done, &mut order);
        }
    }
    order
}

/// Builds a table from one flow per degree; the squarings need `spares` more slots (1 forward,
/// 2 for the derivative), the lowest that hold no result when the program ends.
fn assemble(
    flows: Vec<(usize, Flow, Vec<usize>)>,
    spares: usize,
    thetas: &[(usize, f64)],
) -> Table {
    let mut ops = vec![0u32; HEADER];
    let mut vals = Vec::new();
    let mut slots = 0;
    for (degree, flow, results) in flows {
        let start = (ops.len() - HEADER) / ROW;
        let (at, used) = flow.emit(&results, &mut ops, &mut vals);
        let len = (ops.len() - HEADER) / ROW - start;
        let entry = degree * ENTRY;
        ops[entry] = start as u32;
        ops[entry + 1] = len as u32;
        let (t, dt) = (at[0], at.get(1).copied().unwrap_or(at[0]));
        let free: Vec<usize> = (0..).filter(|s| *s != t && *s != dt).take(spares).collect();
        ops[entry + 2] = t as u32;
        ops[entry + 3] = dt as u32;
        ops[entry + 4] = free[0] as u32;
        ops[entry + 5] = free[spares - 1] as u32;
        slots = slots.max(used).max(free[spares - 1] + 1);
    }
    Table {
        ops_bytes: ops.iter().flat_map(|v| v.to_le_bytes()).collect(),
        vals_bytes: vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        plan_bytes: [thetas.len() as f32, max_squarings()]
            .into_iter()
            .chain(
                thetas
                    .iter()
                    .flat_map(|&(m, theta)| [theta as f32, m as f32]),
            )
            .flat_map(f32::to_le_bytes)
            .collect(),
        slots,
        solves: ops[HEADER..].chunks(ROW).any(|row| row[0] == KIND_SOLVE),
    }
}

/// The forward programs of `method` for f32 compute: r_m(X) = (V - U)^{-1} (V + U) for Padé,
/// T(X) for Taylor, one per degree of the f32 table. With `save` (Taylor only) the values of
/// [`saved_values`] are also saved for [`frechet_saved_table`].
fn forward(method: ExpmMethod, save: bool) -> Table {
    let thetas = plan::table(method, Precision::Single);
    let flows = thetas
        .iter()
        .map(|&(m, _)| {
            let mut flow = Flow::new(1);
            let result = match method {
                ExpmMethod::Pade => {
                    let program = scheme::pade(m);
                    let values = flow.scheme(&program, 0, false);
                    let (u, v) = (values[program.outputs.0], values[program.outputs.1]);
                    let q = flow.lin(&[(v, 1.0), (u, -1.0)], 0.0);
                    let p = flow.lin(&[(v, 1.0), (u, 1.0)], 0.0);
                    flow.steps.push((p, Op::Solve { q }));
                    p
                }
                ExpmMethod::Taylor => {
                    let program = scheme::taylor(m);
                    flow.scheme(&program, 0, save)[program.outputs.0]
                }
            };
            (m, flow, vec![result])
        })
        .collect();
    assemble(flows, 1, thetas)
}

/// The Fréchet-derivative programs: the Taylor schemes of the f32 table with their tangents,
/// the products computed, or (`saved`) the tangents alone over the checkpointing forward's
/// saved values.
fn frechet(saved: bool) -> Table {
    let thetas = plan::table(ExpmMethod::Taylor, Precision::Single);
    let flows = thetas
        .iter()
        .map(|&(m, _)| {
            let program = scheme::taylor(m);
            let mut flow = Flow::new(2);
            let results = if saved {
                let (t, dt) = flow.derivative_from_checkpoint(&program);
                vec![t, dt]
            } else {
                let (map, dmap) = flow.scheme_and_derivative(&program);
                let t = program.outputs.0;
                vec![map[t], dmap[t]]
            };
            (m, flow, results)
        })
        .collect();
    assemble(flows, 2, thetas)
}

/// The forward table of `method`, built once.
pub(crate) fn forward_table(method: ExpmMethod) -> &'static Table {
    static PADE: OnceLock<Table> = OnceLock::new();
    static TAYLOR: OnceLock<Table> = OnceLock::new();
    match method {
        ExpmMethod::Pade => PADE.get_or_init(|| forward(method, false)),
        ExpmMethod::Taylor => TAYLOR.get_or_init(|| forward(method, false)),
    }
}

/// The Taylor forward table that also saves the values its derivative reads (the
/// checkpointing forward), built once.
pub(crate) fn saving_table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| forward(ExpmMethod::Taylor, true))
}

/// The Fréchet-derivative table, built once.
pub(crate) fn frechet_table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| frechet(false))
}

/// The Fréchet-derivative table over the values that [`saving_table`] saves, built once.
pub(crate) fn frechet_saved_table() -> &'static Table {
    static TABLE: OnceLock<Table> = OnceLock::new();
    TABLE.get_or_init(|| frechet(true))
}

/// The largest scaling exponent of f32 compute, for the kernels' planning.
pub(crate) fn max_squarings() -> f32 {
    plan::max_scaling(Precision::Single) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An n x n matrix in f64, row-major.
    type Mat = Vec<f64>;

    fn dim(m: &Mat) -> usize {
        (m.len() as f64).sqrt().round() as usize
    }

    fn mat_mul(a: &Mat, b: &Mat) -> Mat {
        let n = dim(a);
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for k in 0..n {
                for j in 0..n {
                    c[i * n + j] += a[i * n + k] * b[k * n + j];
                }
            }
        }
        c
    }

    fn words(b: &[u8]) -> Vec<[u8; 4]> {
        b.chunks(4).map(|c| [c[0], c[1], c[2], c[3]]).collect()
    }

    fn ops_of(table: &Table) -> Vec<u32> {
        words(&table.ops_bytes)
            .into_iter()
            .map(u32::from_le_bytes)
            .collect()
    }

    /// Runs a table's program of `degree` on n x n matrices in f64 as the kernel would, with the
    /// workspace of `inputs` (slots 0, 1, ...) and the matrix's saved values `saved` (read by
    /// loads, written by stores; those flagged for the squarings only where `squares`); returns
    /// the result slots' values.
    fn interpret(
        table: &Table,
        degree: usize,
        inputs: &[Mat],
        saved: &mut [Mat],
        squares: bool,
    ) -> (Mat, Mat) {
        let n = dim(&inputs[0]);
        let ops = ops_of(table);
        let vals: Vec<f32> = words(&table.vals_bytes)
            .into_iter()
            .map(f32::from_le_bytes)
            .collect();
        let mut work = vec![vec![f64::NAN; n * n]; table.slots];
        work[..inputs.len()].clone_from_slice(inputs);
        let entry = degree * ENTRY;
        let (start, len) = (ops[entry] as usize, ops[entry + 1] as usize);
        assert!(len > 0, "degree {degree} has a program");
        for row in start..start + len {
            let o = &ops[HEADER + row * ROW..HEADER + (row + 1) * ROW];
            let c = &vals[row * ROW..(row + 1) * ROW];
            let s = |k: usize| o[2 + k] as usize;
            let dst = o[1] as usize;
            match o[0] {
                KIND_MUL => {
                    assert!(
                        dst != s(0) && dst != s(1),
                        "a product overwrites an operand"
                    );
                    let p = mat_mul(&work[s(0)], &work[s(1)]);
                    work[dst] = if o[7] == 1 {
                        work[dst].iter().zip(&p).map(|(x, y)| x + y).collect()
                    } else {
                        p
                    };
                }
                KIND_COMBINE => {
                    // As the kernel: padding terms read their slot (which must hold a value:
                    // the workspace starts as NaN here) and weigh it by 0.
                    work[dst] = (0..n * n)
                        .map(|e| {
                            let eye = if e / n == e % n { c[0] as f64 } else { 0.0 };
                            eye + (0..TERMS)
                                .map(|k| c[1 + k] as f64 * work[s(k)][e])
                                .sum::<f64>()
                        })
                        .collect();
                }
                KIND_SOLVE => {
                    assert_eq!(n, 1, "the host interpreter solves 1 x 1 systems only");
                    work[dst][0] /= work[s(0)][0];
                }
                KIND_TANGENT => {
                    let d = s(4);
                    let operands = [s(0), s(1), s(2), s(3)];
                    assert!(
                        dst != d && !operands.contains(&dst) && !operands.contains(&d),
                        "a tangent product overwrites an operand"
                    );
                    let (p, q, dp, dq) = (&work[s(0)], &work[s(1)], &work[s(2)], &work[s(3)]);
                    let (pq, dpq, pdq) = (mat_mul(p, q), mat_mul(dp, q), mat_mul(p, dq));
                    work[dst] = pq;
                    work[d] = dpq.iter().zip(&pdq).map(|(x, y)| x + y).collect();
                }
                KIND_LOAD | KIND_STORE if o[7] == 1 && !squares => {}
                KIND_LOAD => work[dst] = saved[s(0)].clone(),
                KIND_STORE => saved[s(0)] = work[dst].clone(),
                other => panic!("row kind {other}"),
            }
        }
        let (r, d) = (ops[entry + 2] as usize, ops[entry + 3] as usize);
        // The squarings' slots hold no result and lie in the workspace.
        let spare = [ops[entry + 4] as usize, ops[entry + 5] as usize];
        for s in spare {
            assert!(s != r && s != d && s < table.slots, "spare slot {s}");
        }
        if r != d {
            assert!(spare[0] != spare[1], "two spare slots for the derivative");
        }
        (work[r].clone(), work[d].clone())
    }

    /// exp of a small-normed matrix by its Taylor series in f64.
    fn exp_series(x: &Mat) -> Mat {
        let n = dim(x);
        let mut sum: Mat = (0..n * n)
            .map(|e| if e / n == e % n { 1.0 } else { 0.0 })
            .collect();
        let mut term = sum.clone();
        for k in 1..60 {
            term = mat_mul(&term, x).iter().map(|v| v / k as f64).collect();
            sum.iter_mut().zip(&term).for_each(|(s, t)| *s += t);
        }
        sum
    }

    /// exp(X) and the Fréchet derivative L(X, E): the blocks of exp([[X, E], [0, X]]).
    fn exp_and_frechet(x: &Mat, e: &Mat) -> (Mat, Mat) {
        let n = dim(x);
        let mut block = vec![0.0; 4 * n * n];
        for i in 0..n {
            for j in 0..n {
                block[i * 2 * n + j] = x[i * n + j];
                block[i * 2 * n + n + j] = e[i * n + j];
                block[(n + i) * 2 * n + n + j] = x[i * n + j];
            }
        }
        let big = exp_series(&block);
        let part = |col: usize| -> Mat {
            (0..n * n)
                .map(|k| big[(k / n) * 2 * n + col + k % n])
                .collect()
        };
        (part(0), part(n))
    }

    /// Largest entry-wise difference relative to the largest entry of `want`.
    fn relative(got: &Mat, want: &Mat) -> f64 {
        let scale = want.iter().fold(0f64, |m, v| m.max(v.abs()));
        got.iter()
            .zip(want)
            .fold(0f64, |m, (g, w)| m.max((g - w).abs()))
            / scale
    }

    /// A 3 x 3 matrix with no structure, scaled to 1-norm `norm`.
    fn sample(seed: u64, norm: f64) -> Mat {
        let mut state = seed;
        let m: Mat = (0..9)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 11) as f64 / (1u64 << 53) as f64 - 0.5
            })
            .collect();
        let one = (0..3)
            .map(|j| (0..3).map(|i| m[i * 3 + j].abs()).sum::<f64>())
            .fold(0f64, f64::max);
        m.iter().map(|v| v * norm / one).collect()
    }

    #[test]
    fn forward_programs_evaluate_the_exponential() {
        for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
            let table = forward_table(method);
            for &(m, theta) in plan::table(method, Precision::Single) {
                let x = theta * 0.9;
                let (r, _) = interpret(table, m, &[vec![x]], &mut [], false);
                // Within the f32 bar at the top of each degree's range (f32 coefficients).
                assert!((r[0] / x.exp() - 1.0).abs() < 1e-6, "{method:?} {m}: {r:?}");
            }
        }
    }

    #[test]
    fn frechet_programs_evaluate_the_derivative() {
        // Matrices that do not commute with their direction, so that every product and tangent
        // must take its operands in the right order (scalars would not tell).
        let table = frechet_table();
        for &(m, theta) in plan::table(ExpmMethod::Taylor, Precision::Single) {
            let (x, e) = (sample(m as u64, theta * 0.9), sample(100 + m as u64, 0.5));
            let (t, d) = interpret(table, m, &[x.clone(), e.clone()], &mut [], false);
            let (want_t, want_d) = exp_and_frechet(&x, &e);
            assert!(relative(&t, &want_t) < 1e-6, "degree {m}: exp");
            assert!(relative(&d, &want_d) < 1e-6, "degree {m}: derivative");
        }
    }

    #[test]
    fn the_derivative_from_a_checkpoint_equals_the_recomputed_one() {
        let (saving, saved_table) = (saving_table(), frechet_saved_table());
        for &(m, theta) in plan::table(ExpmMethod::Taylor, Precision::Single) {
            let (x, e) = (sample(7 * m as u64, theta * 0.9), sample(3 + m as u64, 2.0));
            let (plain, _) = interpret(
                forward_table(ExpmMethod::Taylor),
                m,
                std::slice::from_ref(&x),
                &mut [],
                false,
            );
            let (want_t, want_d) = exp_and_frechet(&x, &e);
            // Where the plan squares, the derivative reloads T for the squarings; where it does
            // not, T is neither saved nor loaded (its saved value stays NaN here, so a read of
            // it would show in the tangent) and the tangent is the same.
            for squares in [true, false] {
                let mut saved = vec![vec![f64::NAN; 9]; SAVED];
                let inputs = std::slice::from_ref(&x);
                let (t, _) = interpret(saving, m, inputs, &mut saved, squares);
                assert_eq!(t, plain, "degree {m}: saving changes the forward");
                let (t2, d) =
                    interpret(saved_table, m, &[x.clone(), e.clone()], &mut saved, squares);
                assert!(
                    relative(&d, &want_d) < 1e-6,
                    "degree {m}, {squares}: derivative"
                );
                if squares {
                    assert!(relative(&t2, &want_t) < 1e-6, "degree {m}: exp");
                }
            }
        }
    }

    #[test]
    fn programs_have_the_row_kinds_of_their_kernels() {
        let kinds = |table: &Table| -> Vec<u32> {
            ops_of(table)[HEADER..]
                .chunks(ROW)
                .map(|row| row[0])
                .collect()
        };
        // Every product of a Fréchet program has its tangent: none is left unmerged.
        let frechet = kinds(frechet_table());
        assert!(frechet.contains(&KIND_TANGENT));
        assert!(!frechet.contains(&KIND_MUL), "{frechet:?}");
        // A forward program has no tangents (the kernels run them only in derivative modes),
        // and only the checkpointing one stores.
        for method in [ExpmMethod::Pade, ExpmMethod::Taylor] {
            let forward = kinds(forward_table(method));
            assert!(forward.contains(&KIND_MUL) && !forward.contains(&KIND_TANGENT));
            assert!(!forward.contains(&KIND_STORE) && !forward.contains(&KIND_LOAD));
        }
        let saving = kinds(saving_table());
        assert!(saving.contains(&KIND_STORE) && !saving.contains(&KIND_TANGENT));
        assert!(!saving.contains(&KIND_LOAD));
        // The derivative from a checkpoint computes no value of the scheme: two products per
        // product of the scheme remain (dP Q, then += P dQ), none in a tangent row (whose
        // kernel would be in its shader), and it loads what the forward stores.
        let saved = kinds(frechet_saved_table());
        let count = |k: u32, of: &[u32]| of.iter().filter(|&&x| x == k).count();
        assert!(!saved.contains(&KIND_TANGENT) && !saved.contains(&KIND_STORE));
        let products: usize = plan::table(ExpmMethod::Taylor, Precision::Single)
            .iter()
            .map(|&(m, _)| {
                let program = scheme::taylor(m);
                let is_product = |s: &&Step| matches!(s, Step::MatMul(..));
                program.steps.iter().filter(is_product).count()
            })
            .sum();
        assert_eq!(count(KIND_MUL, &saved), 2 * products);
        assert_eq!(count(KIND_LOAD, &saved), count(KIND_STORE, &saving));
        // Per degree, the result alone is saved and loaded only for the squarings: the store
        // reads the forward's result slot, the load writes the derivative's.
        for (table, kind) in [
            (saving_table(), KIND_STORE),
            (frechet_saved_table(), KIND_LOAD),
        ] {
            let ops = ops_of(table);
            for &(m, _) in plan::table(ExpmMethod::Taylor, Precision::Single) {
                let entry = m * ENTRY;
                let (start, len) = (ops[entry] as usize, ops[entry + 1] as usize);
                let flagged: Vec<&[u32]> = ops[HEADER + start * ROW..HEADER + (start + len) * ROW]
                    .chunks(ROW)
                    .filter(|row| row[0] == kind && row[7] == 1)
                    .collect();
                assert_eq!(flagged.len(), 1, "degree {m}: {flagged:?}");
                assert_eq!(flagged[0][1], ops[entry + 2], "degree {m}: not the result");
            }
        }
    }

    #[test]
    fn slots_are_reused() {
        // Taylor 18 has 5 products and 8 combinations over 14 values: far fewer slots suffice.
        let table = forward_table(ExpmMethod::Taylor);
        assert!(table.slots <= 9, "{} slots", table.slots);
        assert!(
            frechet_table().slots <= 16,
            "{} slots",
            frechet_table().slots
        );
        // The derivative from a checkpoint holds no more slots than the forward: seven 64 x 64
        // slots are 112 KiB, two cubes per multiprocessor on an H100 or H200.
        let saved = frechet_saved_table();
        assert!(saved.slots <= saving_table().slots, "{} slots", saved.slots);
        assert!(saved.slots <= 7, "{} slots", saved.slots);
    }
}
