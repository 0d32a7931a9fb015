//! The wirekit service protocol, sans-IO. (Filled in by the std-adapter / firmware issues.)
