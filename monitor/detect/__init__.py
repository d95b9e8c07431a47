"""Layer 3, detect: closed windows are compared with a reference by calibrated detectors."""
