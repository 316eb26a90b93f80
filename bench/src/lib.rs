//! Measurement harness for rpcrdma: latency histograms, sweeps and reports.

pub use rpcrdma_engine as engine;
