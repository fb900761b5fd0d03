//! The image readers on fixture files in each exact byte layout, and every bad-input case.

use std::fs;
use std::path::Path;

use vlgo_datasets::fixtures::{self, synthetic};
use vlgo_datasets::{
    Cifar10, DatasetError, IdxDataset, Stl10, Stl10Unlabeled, TinyImageNet, read_idx,
};

use crate::scratch;

/// The error's message, which must name `file` and contain every one of `words`.
fn assert_names(e: DatasetError, file: &str, words: &[&str]) {
    let msg = e.to_string();
    assert!(msg.contains(file), "{msg:?} does not name {file}");
    for w in words {
        assert!(msg.contains(w), "{msg:?} does not say {w:?}");
    }
}

fn gunzip(path: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

fn gzip(path: &Path, bytes: &[u8]) {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    fs::write(path, e.finish().unwrap()).unwrap();
}

#[test]
fn idx_reads_any_size_from_the_headers() {
    let temp = scratch("idx");
    let dir = temp.path().to_path_buf();
    // An unusual size: 7 train and 3 test images of 5 x 3, 4 classes.
    let mut train = synthetic(1, 5, 3, 4, 7, 1);
    let mut test = synthetic(1, 5, 3, 4, 3, 2);
    let classes = ["a", "b", "c", "d"];
    for set in [&mut train, &mut test] {
        set.classes = classes.iter().map(|c| c.to_string()).collect();
    }
    fixtures::write_idx_dataset(&dir, &train, &test).unwrap();
    let read = IdxDataset::open(&dir, &classes).unwrap();
    assert_eq!(read.train, train);
    assert_eq!(read.test, test);
    // Plain (not gzip) files read the same.
    let plain = read_idx(&dir.join("train-images-idx3-ubyte.gz")).unwrap();
    fixtures::write_idx(&dir.join("plain"), &plain.dims, &plain.data, false).unwrap();
    assert_eq!(read_idx(&dir.join("plain")).unwrap(), plain);
    assert_eq!(plain.dims, vec![7, 5, 3]);
}

#[test]
fn idx_bad_input_names_the_file_and_the_mismatch() {
    let temp = scratch("idx-bad");
    let dir = temp.path().to_path_buf();
    let train = synthetic(1, 4, 4, 3, 6, 1);
    let test = synthetic(1, 4, 4, 3, 2, 2);
    let classes = ["a", "b", "c"];
    let fresh = || fixtures::write_idx_dataset(&dir, &train, &test).unwrap();
    let images = dir.join("train-images-idx3-ubyte.gz");
    let labels = dir.join("train-labels-idx1-ubyte.gz");

    fresh();
    let mut bytes = gunzip(&images);
    bytes.truncate(bytes.len() - 5);
    gzip(&images, &bytes);
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(
        e,
        "train-images-idx3-ubyte.gz",
        &["expected 96 value bytes", "found 91"],
    );

    fresh();
    let mut bytes = gunzip(&images);
    bytes.extend([1, 2, 3]);
    gzip(&images, &bytes);
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(e, "train-images-idx3-ubyte.gz", &["96", "found 99"]);

    fresh();
    let mut bytes = gunzip(&images);
    bytes[2] = 0x0D; // float data
    gzip(&images, &bytes);
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(e, "train-images-idx3-ubyte.gz", &["magic", "2051"]);

    fresh();
    fixtures::write_idx(&labels, &[5], &[0, 1, 2, 0, 1], true).unwrap();
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(
        e,
        "train-labels-idx1-ubyte.gz",
        &["6 labels", "found 5 labels"],
    );

    fresh();
    fixtures::write_idx(&labels, &[6], &[0, 1, 2, 3, 1, 0], true).unwrap();
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(
        e,
        "train-labels-idx1-ubyte.gz",
        &["labels 0..3", "label 3 at position 3"],
    );

    fresh();
    fixtures::write_idx(&images, &[6, 16], &train.pixels, true).unwrap();
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(
        e,
        "train-images-idx3-ubyte.gz",
        &["3 dimensions", "2 dimensions"],
    );

    fresh();
    let compressed = fs::read(&images).unwrap();
    fs::write(&images, &compressed[..compressed.len() / 2]).unwrap();
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(e, "train-images-idx3-ubyte.gz", &["gzip"]);

    fresh();
    fs::remove_file(dir.join("t10k-labels-idx1-ubyte.gz")).unwrap();
    let e = IdxDataset::open(&dir, &classes).unwrap_err();
    assert_names(e, "t10k-labels-idx1-ubyte", &["cannot read"]);
}

#[test]
fn cifar10_reads_its_records_and_rejects_bad_files() {
    let temp = scratch("cifar");
    let dir = temp.path().to_path_buf();
    let train = synthetic(3, 32, 32, 10, 23, 1);
    let test = synthetic(3, 32, 32, 10, 6, 2);
    fixtures::write_cifar10(&dir, &train, &test).unwrap();
    let read = Cifar10::open(&dir).unwrap();
    assert_eq!(read.train, train);
    assert_eq!(read.test, test);
    // The layout itself: record 0 of test_batch.bin is the label, then R, G, B planes.
    let raw = fs::read(dir.join("test_batch.bin")).unwrap();
    assert_eq!(raw.len(), 6 * 3073);
    assert_eq!(u16::from(raw[0]), read.test.label(0));
    assert_eq!(
        raw[1 + 1024 + 5 * 32 + 7],
        read.test.image(0)[1024 + 5 * 32 + 7]
    );

    let batch = dir.join("data_batch_3.bin");
    let good = fs::read(&batch).unwrap();
    fs::write(&batch, &good[..good.len() - 100]).unwrap();
    let e = Cifar10::open(&dir).unwrap_err();
    assert_names(e, "data_batch_3.bin", &["3073 bytes", "bytes over"]);

    let mut bad = good.clone();
    bad[3073] = 10;
    fs::write(&batch, &bad).unwrap();
    let e = Cifar10::open(&dir).unwrap_err();
    assert_names(
        e,
        "data_batch_3.bin",
        &["labels 0..10", "label 10 in record 1"],
    );

    fs::write(&batch, &good).unwrap();
    fs::write(dir.join("batches.meta.txt"), "cat\ndog\n").unwrap();
    let e = Cifar10::open(&dir).unwrap_err();
    assert_names(
        e,
        "batches.meta.txt",
        &["10 class names", "2 non-empty lines"],
    );

    fs::remove_file(dir.join("batches.meta.txt")).unwrap();
    fs::remove_file(dir.join("test_batch.bin")).unwrap();
    let e = Cifar10::open(&dir).unwrap_err();
    assert_names(e, "test_batch.bin", &["cannot read"]);
}

#[test]
fn stl10_transposes_column_major_planes_and_streams_the_unlabeled_file() {
    let temp = scratch("stl");
    let dir = temp.path().to_path_buf();
    let train = synthetic(3, 96, 96, 10, 4, 1);
    let test = synthetic(3, 96, 96, 10, 3, 2);
    let unlabeled = synthetic(3, 96, 96, 10, 5, 3).pixels;
    let folds: Vec<Vec<usize>> = (0..10).map(|f| vec![f % 4, (f + 1) % 4]).collect();
    fixtures::write_stl10(&dir, &train, &test, &unlabeled, &folds).unwrap();
    let read = Stl10::open(&dir).unwrap();
    assert_eq!(read.train, train);
    assert_eq!(read.test, test);
    assert_eq!(read.folds, folds);

    // The file's layout, independently of the writer: byte c * 9216 + x * 96 + y of an image is
    // row y, column x of channel c; labels are stored 1-based.
    let raw = fs::read(dir.join("test_X.bin")).unwrap();
    let (c, y, x) = (2, 5, 71);
    assert_eq!(
        raw[c * 9216 + x * 96 + y],
        read.test.image(0)[c * 9216 + y * 96 + x]
    );
    assert_eq!(
        fs::read(dir.join("test_y.bin")).unwrap()[1],
        read.test.label(1) as u8 + 1
    );

    let stream = Stl10Unlabeled::open(&dir).unwrap();
    assert_eq!(stream.len(), 5);
    let mut two = vec![0u8; 2 * 27648];
    stream.read(2, &mut two).unwrap();
    assert_eq!(two, unlabeled[2 * 27648..4 * 27648]);
    let e = stream.read(4, &mut two).unwrap_err();
    assert!(e.to_string().contains("within 0..5"), "{e}");
}

#[test]
fn stl10_bad_input_names_the_file() {
    let temp = scratch("stl-bad");
    let dir = temp.path().to_path_buf();
    let train = synthetic(3, 96, 96, 10, 3, 1);
    let test = synthetic(3, 96, 96, 10, 2, 2);
    let fresh = || fixtures::write_stl10(&dir, &train, &test, &[0; 27648], &[]).unwrap();

    fresh();
    fs::write(dir.join("train_y.bin"), [1, 2]).unwrap();
    let e = Stl10::open(&dir).unwrap_err();
    assert_names(e, "train_y.bin", &["3 label bytes", "2 bytes"]);

    fresh();
    fs::write(dir.join("test_y.bin"), [1, 0]).unwrap();
    let e = Stl10::open(&dir).unwrap_err();
    assert_names(e, "test_y.bin", &["labels 1..=10", "label 0 at position 1"]);

    fresh();
    fs::write(dir.join("test_y.bin"), [11, 1]).unwrap();
    let e = Stl10::open(&dir).unwrap_err();
    assert_names(e, "test_y.bin", &["label 11"]);

    fresh();
    let x = fs::read(dir.join("train_X.bin")).unwrap();
    fs::write(dir.join("train_X.bin"), &x[..x.len() - 1]).unwrap();
    let e = Stl10::open(&dir).unwrap_err();
    assert_names(
        e,
        "train_X.bin",
        &["27648 bytes", "2 records and 27647 bytes over"],
    );

    fresh();
    let folds = (0..10).map(|_| "0 1 3").collect::<Vec<_>>().join("\n");
    fs::write(dir.join("fold_indices.txt"), folds).unwrap();
    let e = Stl10::open(&dir).unwrap_err();
    assert_names(e, "fold_indices.txt", &["below 3", "\"3\" on line 1"]);

    fresh();
    fs::write(dir.join("unlabeled_X.bin"), [0; 100]).unwrap();
    let e = Stl10Unlabeled::open(&dir).unwrap_err();
    assert_names(e, "unlabeled_X.bin", &["27648 bytes", "100 bytes"]);
}

#[test]
fn tiny_imagenet_decodes_jpegs_in_wnid_order_and_converts_grayscale() {
    let temp = scratch("tin");
    let dir = temp.path().to_path_buf();
    let mut train = synthetic(3, 64, 64, 3, 7, 1);
    // Image 4 grayscale: the writer stores it as a one-channel JPEG.
    let (plane, size) = (64 * 64, 3 * 64 * 64);
    let gray: Vec<u8> = train.image(4)[..plane].to_vec();
    for c in 0..3 {
        train.pixels[4 * size + c * plane..4 * size + (c + 1) * plane].copy_from_slice(&gray);
    }
    let val = synthetic(3, 64, 64, 3, 4, 2);
    fixtures::write_tiny_imagenet(&dir, &train, &val).unwrap();
    let read = TinyImageNet::open(&dir).unwrap();
    assert_eq!(read.wnids.len(), 3);
    assert_eq!(read.train.classes, train.classes);
    // Train images come class by class (wnids order), files by name within a class.
    let mut want: Vec<usize> = (0..train.len()).collect();
    want.sort_by_key(|&i| (train.label(i), format!("{i}")));
    assert_eq!(read.train.len(), 7);
    for (k, &i) in want.iter().enumerate() {
        assert_eq!(read.train.label(k), train.label(i));
        let err = mean_abs_diff(read.train.image(k), train.image(i));
        assert!(err < 4.0, "train image {i}: JPEG error {err}");
        if i == 4 {
            let got = read.train.image(k);
            assert_eq!(got[..plane], got[plane..2 * plane]);
            assert_eq!(got[..plane], got[2 * plane..]);
        }
    }
    for i in 0..val.len() {
        assert_eq!(read.val.label(i), val.label(i));
        assert!(mean_abs_diff(read.val.image(i), val.image(i)) < 4.0);
    }
}

fn mean_abs_diff(a: &[u8], b: &[u8]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) - f64::from(y)).abs())
        .sum::<f64>()
        / a.len() as f64
}

#[test]
fn tiny_imagenet_bad_input_names_the_file() {
    let temp = scratch("tin-bad");
    let dir = temp.path().to_path_buf();
    let train = synthetic(3, 64, 64, 2, 2, 1);
    let val = synthetic(3, 64, 64, 2, 2, 2);
    let fresh = || {
        let _ = fs::remove_dir_all(&dir);
        fixtures::write_tiny_imagenet(&dir, &train, &val).unwrap();
    };

    fresh();
    fs::remove_dir_all(dir.join("train/n00000001")).unwrap();
    let e = TinyImageNet::open(&dir).unwrap_err();
    assert_names(e, "n00000001", &["cannot read"]);

    fresh();
    fs::write(
        dir.join("val/val_annotations.txt"),
        "val_0.JPEG\tn99999999\t0\t0\t1\t1",
    )
    .unwrap();
    let e = TinyImageNet::open(&dir).unwrap_err();
    assert_names(e, "val_annotations.txt", &["wnids.txt", "n99999999"]);

    fresh();
    fs::write(dir.join("val/images/val_1.JPEG"), b"not a jpeg").unwrap();
    let e = TinyImageNet::open(&dir).unwrap_err();
    assert_names(e, "val_1.JPEG", &["a JPEG image"]);

    fresh();
    let small = image::RgbImage::new(32, 32);
    small
        .save_with_format(dir.join("val/images/val_0.JPEG"), image::ImageFormat::Jpeg)
        .unwrap();
    let e = TinyImageNet::open(&dir).unwrap_err();
    assert_names(e, "val_0.JPEG", &["64 x 64", "32 x 32"]);
}
