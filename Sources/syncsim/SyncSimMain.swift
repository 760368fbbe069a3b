import SyncSim

/// The executable is a thin shell: everything lives in the SyncSim library.
@main extension SyncSimCommand {}
