//! `idemgate demo` must keep passing: it is the README's first command.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_demo_scenario_behaves() {
    assert_eq!(idemgate::demo::run().await, Ok(true));
}
