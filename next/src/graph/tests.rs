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
