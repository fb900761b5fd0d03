use burn::backend::Autodiff;
use burn::prelude::*;
use burn_flex::Flex;
use std::time::Instant;
use vlgo_core::{LieOperatorsConfig, OperatorForm};
type B = Autodiff<Flex>;

fn main() {
    vlgo_core::cpu::host::keep_freed_buffers();
    let dev = Default::default();
    let n = 256;
    let ops = LieOperatorsConfig::new(16, 128)
        .with_form(OperatorForm::BlockDiagonal(64))
        .init::<B>(&dev)
        .unwrap();
    let mut t = vec![Vec::new(); 5];
    let ga = Tensor::<B, 4>::random([n, 2, 64, 64], burn::tensor::Distribution::Default, &dev);
    for rep in 0..25 {
        let c = Tensor::<B, 2>::random([n, 16], burn::tensor::Distribution::Normal(0.0, 0.05), &dev).require_grad();
        let z = Tensor::<B, 2>::random([n, 128], burn::tensor::Distribution::Default, &dev).require_grad();
        let g = Tensor::<B, 2>::random([n, 128], burn::tensor::Distribution::Default, &dev);
        let t0 = Instant::now();
        let a = ops.generator(c.clone());
        let _ = a.clone().slice([0..1, 0..1, 0..1, 0..1]).into_data();
        let t1 = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let grads = (a * ga.clone()).sum().backward();
        let _ = ops.psi().grad(&grads).unwrap().into_data();
        let t4 = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let moved = ops.transport(c.clone(), z.clone());
        let _ = moved.clone().slice([0..1, 0..1]).into_data();
        let t2 = t0.elapsed().as_secs_f64();
        let t0 = Instant::now();
        let grads = (moved * g).sum().backward();
        let _ = ops.psi().grad(&grads).unwrap().into_data();
        let t3 = t0.elapsed().as_secs_f64();
        if rep >= 5 {
            t[0].push(t1); t[1].push(t4); t[2].push(t2); t[3].push(t3);
        }
    }
    for (name, v) in ["generator fwd", "generator bwd (A * G)", "transport fwd", "transport bwd"].iter().zip(t.iter_mut()) {
        v.sort_by(f64::total_cmp);
        if !v.is_empty() { println!("{name}: median {:.2} ms min {:.2}", v[v.len()/2]*1e3, v[0]*1e3); }
    }
}
