//! The one-run audit (Steinke, Nasr & Jagielski 2023) of the real DP-SGD mechanism stays below
//! the accountant's ε; with the noise switched off it rises above it (`examples/dp_audit.rs`,
//! fixed seeds).

#[allow(dead_code)]
#[path = "../examples/dp_audit.rs"]
mod dp_audit;

#[test]
fn should_separate_the_real_mechanism_from_a_broken_one() {
    for seed in [1, 2, 3] {
        let real = dp_audit::audit_run(1.0, seed).unwrap();
        let broken = dp_audit::audit_run(0.0, seed).unwrap();
        println!(
            "seed {seed}: real ε_lb {:.3}, broken ε_lb {:.3}, claimed ε {:.3}",
            real.report.epsilon_lower_bound, broken.report.epsilon_lower_bound, real.claimed
        );
        assert!(real.report.epsilon_lower_bound < real.claimed);
        assert!(broken.report.epsilon_lower_bound > real.claimed);
    }
}
