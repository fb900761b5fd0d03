//! Which Burn backend the program runs on, chosen at run time among those compiled in:
//! `vlgo --backend NAME ...` or the `VLGO_BACKEND` variable (the flag wins).
//!
//! Flex (the default CPU backend, cargo feature `flex`) and NdArray are always compiled in;
//! `--features wgpu` adds `wgpu` (Vulkan, Metal, DirectX or software Vulkan) and
//! `--features cuda` adds `cuda`.

use std::fmt;

use burn::backend::Autodiff;
use manifoldclr::TrainBackend;

use crate::error::{CliError, Result};

/// Work that runs on whichever backend is chosen at run time ([`BackendName::run`]).
pub trait OnBackend {
    /// What the work returns.
    type Output;

    /// Does the work on the backend `B`, on `device`.
    fn run<B: TrainBackend>(self, device: &B::Device) -> Result<Self::Output>;
}

/// A backend the program can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendName {
    /// Burn's Flex CPU backend with this project's CPU kernels.
    Flex,
    /// Burn's NdArray CPU backend with this project's CPU kernels.
    NdArray,
    /// Burn's CubeCL backend on wgpu (with fusion).
    Wgpu,
    /// Burn's CubeCL backend on CUDA (with fusion).
    Cuda,
}

impl BackendName {
    /// Every backend the program knows, compiled in or not.
    pub const ALL: [Self; 4] = [Self::Flex, Self::NdArray, Self::Wgpu, Self::Cuda];

    /// The name on the command line and in `summary.json`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Flex => "flex",
            Self::NdArray => "ndarray",
            Self::Wgpu => "wgpu",
            Self::Cuda => "cuda",
        }
    }

    /// Whether this build can run on it (its cargo feature was on).
    pub fn compiled(&self) -> bool {
        match self {
            Self::Flex => cfg!(feature = "flex"),
            Self::NdArray => true,
            Self::Wgpu => cfg!(feature = "wgpu"),
            Self::Cuda => cfg!(feature = "cuda"),
        }
    }

    /// The backends of this build.
    pub fn available() -> Vec<Self> {
        Self::ALL.into_iter().filter(Self::compiled).collect()
    }

    /// The backend when none is named: Flex where compiled in, else NdArray.
    pub fn default_choice() -> Self {
        match Self::Flex.compiled() {
            true => Self::Flex,
            false => Self::NdArray,
        }
    }

    /// Parses a name; an unknown backend, or one this build lacks, is an error that lists the
    /// available ones.
    ///
    /// ```
    /// use vlgo::backend::BackendName;
    /// assert_eq!(BackendName::parse("ndarray").unwrap(), BackendName::NdArray);
    /// let err = BackendName::parse("nonsense").unwrap_err().to_string();
    /// assert!(err.contains("nonsense") && err.contains("ndarray"));
    /// ```
    pub fn parse(name: &str) -> Result<Self> {
        let available: Vec<&str> = Self::available().iter().map(Self::as_str).collect();
        let found = Self::ALL.into_iter().find(|b| b.as_str() == name.trim());
        match found {
            Some(b) if b.compiled() => Ok(b),
            Some(b) => Err(CliError::invalid(
                "backend",
                b,
                format!(
                    "one compiled into this build: {} (build with `--features {b}` for {b})",
                    available.join(", ")
                ),
            )),
            None => Err(CliError::invalid(
                "backend",
                format!("{name:?}"),
                format!("one of {}", available.join(", ")),
            )),
        }
    }

    /// The backend named by `--backend NAME` anywhere in `args` (removed from them), else by
    /// `env` (the `VLGO_BACKEND` variable), else the default; and the remaining arguments.
    ///
    /// ```
    /// use vlgo::backend::BackendName;
    /// let args: Vec<String> = ["--backend", "ndarray", "swiss-roll", "--epochs", "2"]
    ///     .map(String::from)
    ///     .to_vec();
    /// let (backend, rest) = BackendName::from_args(&args, None).unwrap();
    /// assert_eq!((backend, rest.len()), (BackendName::NdArray, 3));
    /// let (backend, _) = BackendName::from_args(&rest, Some("ndarray".into())).unwrap();
    /// assert_eq!(backend, BackendName::NdArray);
    /// assert!(BackendName::from_args(&["--backend".to_string()], None).is_err());
    /// ```
    pub fn from_args(args: &[String], env: Option<String>) -> Result<(Self, Vec<String>)> {
        let (named, rest) = Self::split_args(args)?;
        Ok((Self::choose(named, env)?, rest))
    }

    /// The backend `named` on the command line, else the one of `env` (the `VLGO_BACKEND`
    /// variable; blank counts as unset), else the default.
    ///
    /// ```
    /// use vlgo::backend::BackendName;
    /// let pick = |named: Option<&str>, env: Option<&str>| {
    ///     BackendName::choose(named.map(String::from), env.map(String::from))
    /// };
    /// assert_eq!(pick(Some("ndarray"), Some("bogus")).unwrap(), BackendName::NdArray);
    /// assert_eq!(pick(None, Some(" ")).unwrap(), BackendName::default_choice());
    /// assert!(pick(None, Some("bogus")).is_err());
    /// ```
    pub fn choose(named: Option<String>, env: Option<String>) -> Result<Self> {
        match named.or(env.filter(|e| !e.trim().is_empty())) {
            Some(name) => Self::parse(&name),
            None => Ok(Self::default_choice()),
        }
    }

    /// The value of `--backend NAME` in `args`, unchecked, and the other arguments.
    pub fn split_args(args: &[String]) -> Result<(Option<String>, Vec<String>)> {
        let mut rest = Vec::with_capacity(args.len());
        let mut named = None;
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            if arg == "--backend" {
                let value = it
                    .next()
                    .ok_or_else(|| CliError::invalid("--backend", "nothing", "expected a value"))?;
                if named.replace(value.clone()).is_some() {
                    return Err(CliError::invalid(
                        "--backend",
                        "given twice",
                        "one --backend",
                    ));
                }
            } else {
                rest.push(arg.clone());
            }
        }
        Ok((named, rest))
    }
}

impl BackendName {
    /// Runs `job` on this backend's default device (under autodiff).
    ///
    /// ```
    /// use vlgo::backend::{BackendName, OnBackend};
    ///
    /// struct Name;
    /// impl OnBackend for Name {
    ///     type Output = String;
    ///     fn run<B: manifoldclr::TrainBackend>(self, device: &B::Device) -> vlgo::Result<String> {
    ///         Ok(<B as burn::prelude::Backend>::name(device))
    ///     }
    /// }
    /// assert!(BackendName::NdArray.run(Name).unwrap().contains("ndarray"));
    /// ```
    pub fn run<J: OnBackend>(self, job: J) -> Result<J::Output> {
        match self {
            #[cfg(feature = "flex")]
            Self::Flex => job.run::<Autodiff<burn::backend::Flex>>(&Default::default()),
            Self::NdArray => job.run::<Autodiff<burn::backend::NdArray>>(&Default::default()),
            #[cfg(feature = "wgpu")]
            Self::Wgpu => job.run::<Autodiff<burn::backend::Wgpu>>(&Default::default()),
            #[cfg(feature = "cuda")]
            Self::Cuda => job.run::<Autodiff<burn::backend::Cuda>>(&Default::default()),
            #[allow(unreachable_patterns)]
            other => Err(CliError::invalid(
                "backend",
                other,
                "one compiled into this build",
            )),
        }
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
