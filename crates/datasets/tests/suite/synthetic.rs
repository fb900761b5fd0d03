//! The swiss roll and its neighbour pairs.

use vlgo_datasets::{NeighbourPairs, SwissRollConfig};

#[test]
fn swiss_roll_is_seeded_and_on_the_roll() {
    let config = SwissRollConfig {
        points: 2000,
        seed: 7,
    };
    let roll = config.generate().unwrap();
    assert_eq!(roll, config.generate().unwrap());
    assert_ne!(
        roll,
        SwissRollConfig { seed: 8, ..config }.generate().unwrap()
    );
    let pi = std::f32::consts::PI;
    for (p, &t) in roll.points.iter().zip(&roll.t) {
        assert!((1.5 * pi..=4.5 * pi).contains(&t));
        assert!((0.0..=21.0).contains(&p[1]));
        assert!((p[0] - t * t.cos()).abs() < 1e-4 && (p[2] - t * t.sin()).abs() < 1e-4);
    }
}

#[test]
fn neighbour_ranks_match_a_full_sort() {
    let roll = SwissRollConfig {
        points: 300,
        seed: 1,
    }
    .generate()
    .unwrap();
    let pairs = NeighbourPairs::new(&roll.points, 20, 60).unwrap();
    assert_eq!(pairs.len(), 300);
    for i in [0, 17, 299] {
        let p = roll.points[i];
        let mut all: Vec<(f32, usize)> = (0..300)
            .filter(|&j| j != i)
            .map(|j| {
                let q = roll.points[j];
                ((0..3).map(|k| (p[k] - q[k]).powi(2)).sum(), j)
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let expected: Vec<usize> = all[19..60].iter().map(|&(_, j)| j).collect();
        assert_eq!(pairs.neighbours(i), expected.as_slice(), "point {i}");
    }
}

#[test]
fn an_epoch_visits_every_point_once_with_partners_among_its_neighbours() {
    let roll = SwissRollConfig {
        points: 1000,
        seed: 2,
    }
    .generate()
    .unwrap();
    let pairs = NeighbourPairs::new(&roll.points, 20, 60).unwrap();
    let epoch = pairs.epoch(3, 5, 300);
    assert_eq!(
        epoch.iter().map(Vec::len).collect::<Vec<_>>(),
        [300, 300, 300, 100]
    );
    let mut seen: Vec<usize> = epoch.iter().flatten().map(|&(a, _)| a).collect();
    for &(a, p) in epoch.iter().flatten() {
        assert!(pairs.neighbours(a).contains(&p));
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..1000).collect::<Vec<_>>());
    assert_eq!(epoch, pairs.epoch(3, 5, 300));
    assert_ne!(epoch, pairs.epoch(3, 6, 300));
    // Partners spread over the whole rank window, not only its ends.
    let ranks: std::collections::BTreeSet<usize> = epoch
        .iter()
        .flatten()
        .map(|&(a, p)| pairs.neighbours(a).iter().position(|&q| q == p).unwrap())
        .collect();
    assert!(ranks.len() > 35, "{} distinct ranks", ranks.len());
}

#[test]
fn bad_neighbour_settings_are_named() {
    let line: Vec<[f32; 3]> = (0..10).map(|i| [i as f32, 0.0, 0.0]).collect();
    let e = NeighbourPairs::new(&line, 5, 2).unwrap_err().to_string();
    assert!(e.contains("k1 must be <= k2") && e.contains("5..2"), "{e}");
    let e = NeighbourPairs::new(&line, 1, 10).unwrap_err().to_string();
    assert!(e.contains("number of points") && e.contains("10"), "{e}");
    let e = NeighbourPairs::new(&line, 0, 3).unwrap_err().to_string();
    assert!(e.contains("k1"), "{e}");
    let mut bad = line.clone();
    bad[4][1] = f32::NAN;
    let e = NeighbourPairs::new(&bad, 1, 3).unwrap_err().to_string();
    assert!(e.contains("index 4"), "{e}");
}
