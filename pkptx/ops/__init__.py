"""Host APIs: validate arguments, pick a configuration, build (cached), launch."""
