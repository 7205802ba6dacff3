//! The interpreter against Burn itself: a recorded model run on Flex equals its forward pass,
//! and run on `Autodiff<Flex>` its gradients equal Burn's own backward.

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::{Linear, LinearConfig};
use burn::optim::GradientsParams;
use burn::tensor::{Device, Tensor, TensorData};
use burn_autodiff::Autodiff;
use burn_backend::TensorMetadata;
use burn_backend::backend::AutodiffBackend;
use burn_backend::ops::FloatTensorOps;
use burn_dispatch::DispatchTensor;
use burn_dispatch::backends::Flex;

use super::{Recording, TensorSig, capture, placeholder};
use crate::runtime::UserBackend;
use crate::value::Value;

#[derive(Module, Debug)]
struct Mlp {
    l1: Linear,
    l2: Linear,
}

impl Mlp {
    fn loss(&self, x: Tensor<1>, y: Tensor<1>) -> Tensor<1> {
        let h = burn::tensor::activation::relu(self.l1.forward(x));
        (self.l2.forward(h) - y).powi_scalar(2).mean()
    }
}

/// The model's float parameters as dispatch tensors, in visiting order.
struct Params(Vec<DispatchTensor>);
impl ModuleVisitor for Params {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0.push(param.val().into_dispatch());
    }
}

fn params(model: &Mlp) -> Vec<DispatchTensor> {
    let mut p = Params(Vec::new());
    model.visit(&mut p);
    p.0
}

#[allow(deprecated)]
fn close(a: &TensorData, b: &TensorData) {
    let (a, b) = (a.to_vec::<f32>().unwrap(), b.to_vec::<f32>().unwrap());
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(&b) {
        assert!((x - y).abs() < 1e-6, "{a:?} vs {b:?}");
    }
}

#[test]
fn should_replay_a_model_and_its_gradients_as_burn_computes_them() {
    let device = Device::flex();
    let model = Mlp {
        l1: LinearConfig::new(4, 3).init(&device),
        l2: LinearConfig::new(3, 2).init(&device),
    };
    let x = Tensor::<1>::from_floats([0.5, -1.0, 2.0, 0.25], &device);
    let y = Tensor::<1>::from_floats([1.0, -1.0], &device);
    let sigs = [&x, &y].map(|t| TensorSig {
        shape: t.shape(),
        dtype: t.dtype(),
    });

    let (program, ()) = capture("test", false, |cap| {
        let m = model.clone().to_device(cap);
        let xs: Vec<DispatchTensor> = sigs.iter().map(|s| placeholder(s, cap)).collect();
        let loss = m.loss(
            Tensor::from_dispatch(xs[0].clone()),
            Tensor::from_dispatch(xs[1].clone()),
        );
        let mut inputs = params(&m);
        inputs.extend(xs);
        Ok(Recording {
            inputs,
            outputs: vec![loss.into_dispatch()],
            extra: (),
        })
    })
    .unwrap();

    // Values: the program on Flex equals the forward pass.
    let mut inputs: Vec<Value<Flex>> = params(&model)
        .into_iter()
        .map(|t| Flex::value(t).unwrap())
        .collect();
    inputs.push(Flex::value(x.clone().into_dispatch()).unwrap());
    inputs.push(Flex::value(y.clone().into_dispatch()).unwrap());
    let out = program
        .run::<Flex>(inputs.clone(), &Default::default())
        .unwrap();
    let replayed = Tensor::<1>::from_dispatch(Flex::tensor(out.into_iter().next().unwrap()));
    let direct = model.loss(x.clone(), y.clone());
    close(&replayed.into_data(), &direct.into_data());

    // Gradients: the program on Autodiff<Flex> equals Burn's own backward.
    type AD = Autodiff<Flex>;
    let n_params = 4;
    let ad_inputs: Vec<Value<AD>> = inputs
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let t = AD::from_inner(v.float());
            Value::Float(if i < n_params {
                AD::float_set_require_grad(t, true)
            } else {
                t
            })
        })
        .collect();
    let leaves: Vec<_> = ad_inputs[..n_params]
        .iter()
        .map(|v| v.clone().float())
        .collect();
    let loss = program.run::<AD>(ad_inputs, &Default::default()).unwrap();
    let grads = AD::backward(loss.into_iter().next().unwrap().float());

    let trained = model.clone().train();
    let loss = trained.loss(x, y);
    let burn_grads = GradientsParams::from_grads(loss.backward(), &trained);
    let ids = [
        trained.l1.weight.id,
        trained.l1.bias.as_ref().unwrap().id,
        trained.l2.weight.id,
        trained.l2.bias.as_ref().unwrap().id,
    ];
    for (leaf, id) in leaves.iter().zip(ids) {
        let ours = AD::grad(leaf, &grads).expect("a gradient for every parameter");
        let ours =
            Tensor::<2>::from_dispatch(Flex::tensor(Value::Float(match ours.shape().num_dims() {
                1 => Flex::float_reshape(ours.clone(), [1, ours.shape()[0]].into()),
                _ => ours,
            })));
        let theirs: Tensor<2> = match ours.dims()[0] {
            _ if leaf.shape().num_dims() == 2 => burn_grads.get::<2>(id).unwrap(),
            _ => burn_grads.get::<1>(id).unwrap().unsqueeze(),
        };
        close(&ours.into_data(), &theirs.into_data());
    }
}

/// The first gate of the port: per-example gradients of an unmodified Burn 0.22 MLP, recorded
/// once and replayed batched on `Autodiff<Vmap<Flex>>`, equal the loop of Burn's own backward.
#[test]
fn should_give_per_example_gradients_equal_to_the_loop_of_burns_backward() {
    use crate::level::{Level, Randomness, VmapScope};
    use crate::{BatchOps, Vmap};
    type V = Vmap<Flex>;
    type AD = Autodiff<V>;

    let device = Device::flex();
    let model = Mlp {
        l1: LinearConfig::new(4, 3).init(&device),
        l2: LinearConfig::new(3, 2).init(&device),
    };
    let batch = 5;
    let xs = Tensor::<2>::random([batch, 4], burn::tensor::Distribution::Default, &device);
    let ys = Tensor::<2>::random([batch, 2], burn::tensor::Distribution::Default, &device);
    let sigs = [
        TensorSig {
            shape: [4].into(),
            dtype: xs.dtype(),
        },
        TensorSig {
            shape: [2].into(),
            dtype: ys.dtype(),
        },
    ];
    let (program, ()) = capture("test", true, |cap| {
        let m = model.clone().to_device(cap);
        let args: Vec<DispatchTensor> = sigs.iter().map(|s| placeholder(s, cap)).collect();
        let loss = m.loss(
            Tensor::from_dispatch(args[0].clone()),
            Tensor::from_dispatch(args[1].clone()),
        );
        let mut inputs = params(&m);
        inputs.extend(args);
        Ok(Recording {
            inputs,
            outputs: vec![loss.into_dispatch()],
            extra: (),
        })
    })
    .unwrap();

    let level = Level::fresh();
    let lift =
        |t: DispatchTensor| crate::tensor::VmapTensor::unbatched(Flex::value(t).unwrap().float());
    let tracked: Vec<_> = params(&model)
        .into_iter()
        .map(|p| AD::float_set_require_grad(AD::from_inner(lift(p)), true))
        .collect();
    let mut inputs: Vec<Value<AD>> = tracked.iter().cloned().map(Value::Float).collect();
    for t in [&xs, &ys] {
        let batched = V::float_batch(lift(t.clone().into_dispatch()), 0, level);
        inputs.push(Value::Float(AD::from_inner(batched)));
    }
    let scope = VmapScope::enter(level, batch, Randomness::Error);
    let loss = program.run::<AD>(inputs, &Default::default()).unwrap();
    let grads = AD::backward(loss.into_iter().next().unwrap().float());
    let per_example: Vec<Tensor<3>> = tracked
        .iter()
        .map(|t| {
            let g = V::float_unbatch(AD::grad(t, &grads).unwrap(), level, batch, 0);
            let g = crate::ops::into_unbatched(g, Flex::float_reshape);
            Tensor::<3>::from_dispatch(Flex::tensor(Value::Float(match g.shape().num_dims() {
                2 => Flex::float_reshape(g.clone(), [g.shape()[0], 1, g.shape()[1]].into()),
                _ => g,
            })))
        })
        .collect();
    drop(scope);

    for i in 0..batch {
        let trained = model.clone().train();
        let x = xs.clone().slice([i..i + 1, 0..4]).reshape([4]);
        let y = ys.clone().slice([i..i + 1, 0..2]).reshape([2]);
        let burn_grads = GradientsParams::from_grads(trained.loss(x, y).backward(), &trained);
        let ids = [
            (trained.l1.weight.id, 2),
            (trained.l1.bias.as_ref().unwrap().id, 1),
            (trained.l2.weight.id, 2),
            (trained.l2.bias.as_ref().unwrap().id, 1),
        ];
        for ((id, rank), ours) in ids.into_iter().zip(&per_example) {
            let theirs: Tensor<2> = match rank {
                2 => burn_grads.get::<2>(id).unwrap(),
                _ => burn_grads.get::<1>(id).unwrap().unsqueeze(),
            };
            let [_, r, c] = ours.dims();
            let ours_i = ours.clone().slice([i..i + 1, 0..r, 0..c]).reshape([r, c]);
            close(&ours_i.into_data(), &theirs.into_data());
        }
    }
}

/// A recorded `x @ w + b` (Burn's decomposition of a `Linear`: matmul, the bias reshaped to
/// `[1, d]`, an addition) replays as one `linear` with its bias, with the values and gradients of
/// the three ops; a product that something else reads too keeps its addition.
#[test]
fn should_join_the_bias_to_its_linear_only_where_nothing_else_reads_the_product() {
    use burn_ir::{ModuleOperationIr, NumericOperationIr, OperationIr};
    let device = Device::flex();
    let w = Tensor::<2>::from_floats([[1.0, -2.0, 0.5], [0.25, 1.0, -1.0]], &device);
    let b = Tensor::<1>::from_floats([0.5, -0.25, 2.0], &device);
    let x = Tensor::<2>::from_floats([[1.0, 2.0], [-3.0, 0.5], [0.0, 4.0]], &device);
    let sigs = [&w.clone().into_dispatch(), &b.clone().into_dispatch()]
        .map(|t| TensorSig {
            shape: t.shape(),
            dtype: t.dtype(),
        })
        .into_iter()
        .chain([TensorSig {
            shape: x.shape(),
            dtype: x.dtype(),
        }])
        .collect::<Vec<_>>();
    for keep_product in [false, true] {
        let (program, ()) = capture("test", true, |cap| {
            let args: Vec<DispatchTensor> = sigs.iter().map(|s| placeholder(s, cap)).collect();
            let w = Tensor::<2>::from_dispatch(args[0].clone());
            let b = Tensor::<1>::from_dispatch(args[1].clone());
            let x = Tensor::<2>::from_dispatch(args[2].clone());
            let product = x.matmul(w);
            let y = product.clone() + b.unsqueeze::<2>();
            let mut outputs = vec![y.into_dispatch()];
            if keep_product {
                outputs.push(product.into_dispatch());
            }
            Ok(Recording {
                inputs: args,
                outputs,
                extra: (),
            })
        })
        .unwrap();
        let biased = |op: &OperationIr| match op {
            OperationIr::Module(ModuleOperationIr::Linear(l)) => l.bias.is_some(),
            _ => false,
        };
        let adds = |op: &OperationIr| {
            matches!(op, OperationIr::NumericFloat(_, NumericOperationIr::Add(_)))
        };
        let ops = program.ops();
        assert_eq!(
            (ops.iter().any(biased), ops.iter().any(adds)),
            (!keep_product, keep_product),
            "{ops:?}"
        );

        // Values and gradients as Burn computes `x @ w + b` itself.
        type AD = Autodiff<Flex>;
        let inputs: Vec<Value<AD>> = [&w.clone().into_dispatch(), &b.clone().into_dispatch()]
            .into_iter()
            .chain([&x.clone().into_dispatch()])
            .enumerate()
            .map(|(i, t)| {
                let t = AD::from_inner(Flex::value(t.clone()).unwrap().float());
                Value::Float(AD::float_set_require_grad(t, i < 2))
            })
            .collect();
        let leaves: Vec<_> = inputs[..2].iter().map(|v| v.clone().float()).collect();
        let out = program.run::<AD>(inputs, &Default::default()).unwrap();
        let y = out.into_iter().next().unwrap().float();
        let value = Tensor::<2>::from_dispatch(Flex::tensor(Value::Float(AD::inner(y.clone()))));
        let grads = AD::backward(AD::float_sum(y));

        let (tw, tb) = (
            w.clone().autodiff().require_grad(),
            b.clone().autodiff().require_grad(),
        );
        let direct = x.clone().autodiff().matmul(tw.clone()) + tb.clone().unsqueeze::<2>();
        close(&value.into_data(), &direct.clone().into_data());
        let theirs = direct.sum().backward();
        let gw = Flex::tensor(Value::Float(AD::grad(&leaves[0], &grads).unwrap()));
        let gb = Flex::tensor(Value::Float(AD::grad(&leaves[1], &grads).unwrap()));
        let (gw, gb) = (
            Tensor::<2>::from_dispatch(gw),
            Tensor::<1>::from_dispatch(gb),
        );
        close(&gw.into_data(), &tw.grad(&theirs).unwrap().into_data());
        close(&gb.into_data(), &tb.grad(&theirs).unwrap().into_data());
    }
}
