import { render } from 'preact';
import { App } from './app.js';
import { SignInGate } from './signin.js';
import './styles.css';

const root = document.getElementById('app');
if (root) {
  render(
    <SignInGate>
      <App />
    </SignInGate>,
    root,
  );
}
