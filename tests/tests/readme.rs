//! What the README tells a reader who copies from it: its code as a reader sees it compiles
//! (no rustdoc-hidden lines), the dependencies it names are the ones its recipes need, and its
//! store table says what the stores do.

use tower_lock::{Locker, MemoryBackend};

const README: &str = include_str!("../../README.md");

/// The README's fenced blocks in `language`, each as its lines.
fn blocks(language: &str) -> Vec<Vec<&'static str>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in README.lines() {
        match (&mut current, line.strip_prefix("```")) {
            (None, Some(info)) if info.split(',').next() == Some(language) => {
                current = Some(Vec::new());
            }
            (Some(_), Some("")) => blocks.extend(current.take()),
            (Some(block), _) => block.push(line),
            (None, _) => {}
        }
    }
    blocks
}

#[test]
fn the_rust_examples_show_the_whole_program() {
    let rust = blocks("rust");
    assert!(rust.len() >= 2, "the README's Rust examples were not found");
    for block in rust {
        let hidden: Vec<_> = block.iter().filter(|line| line.starts_with("# ")).collect();
        assert!(
            hidden.is_empty(),
            "a reader copying this example gets lines rustdoc hides: {hidden:?}"
        );
    }
}

#[test]
fn the_dependencies_cover_the_whole_router_recipe() {
    let toml = blocks("toml").concat().join("\n");
    for dependency in ["tower-lock", "axum", "tokio", "tower", "http"] {
        let named = toml.contains(&format!("{dependency} ="));
        assert!(
            named,
            "the README's dependencies do not name {dependency}:\n{toml}"
        );
    }
}

#[test]
fn a_router_layer_is_said_to_lock_every_route_before_it() {
    assert!(README.contains("locks **every route added before it**"));
    assert!(README.contains("routes added after the layer are not locked"));
}

/// The store table's memory row says one counter fences the whole store, and it does: locks
/// on four keys get four consecutive fences.
#[tokio::test]
async fn the_memory_store_fences_from_one_counter() {
    let row = README
        .lines()
        .find(|line| line.contains("| `MemoryBackend` |"))
        .expect("the store table's memory row");
    assert!(row.contains("one counter for the whole store"), "{row}");

    let locker = Locker::new(MemoryBackend::new());
    let mut fences = Vec::new();
    for key in ["a", "b", "c", "d"] {
        let held = locker.lock(key).await.unwrap();
        fences.push(held.fence().unwrap().get());
        held.release().await.unwrap();
    }
    let steps: Vec<u64> = fences.windows(2).map(|pair| pair[1] - pair[0]).collect();
    assert!(
        steps.iter().all(|step| *step == steps[0]),
        "fences of four keys: {fences:?}"
    );
}
